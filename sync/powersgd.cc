#include "sync/powersgd.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "comm/dtype/kernels.h"
#include "sync/ddp.h"
#include "sync/matmul.h"
#include "torch_compat/generator.h"
#include "torch_compat/randn.h"

extern "C" {
// OpenBLAS's LAPACK, as torch.linalg.qr reaches it.
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau,
             float* work, const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda,
             const float* tau, float* work, const int* lwork, int* info);
}

namespace ringlab::sync {
namespace {

// torch's tensors are 64-byte aligned (c10's CPU allocator): the buffers
// the products read and write are too, so that each matrix, at the same
// offset into its buffer as torch's, is aligned as torch's is, should a
// BLAS kernel choose its path by alignment.
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}  // NOLINT: the allocator's conversion
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const Aligned64&) const { return true; }
  bool operator!=(const Aligned64&) const { return false; }
};
using Floats = std::vector<float, Aligned64<float>>;

// x /= world, a true division per element as torch's div_.
void DivideBy(int world, float* x, size_t n) {
  comm::dtype::KernelsFor(comm::DataType::kFloat32)
      .scale(x, static_cast<float>(world), n);
}

// ||x|| of a contiguous column as torch.linalg.vector_norm computes it here:
// 8 float lanes of fused multiply-adds, the lanes added in order, the tail
// fused into the sum, then the square root.
float NormOfContiguous(const float* x, size_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j)
      lanes[j] = std::fmaf(x[i + j], x[i + j], lanes[j]);
  }
  float sum = lanes[0];
  for (int j = 1; j < 8; ++j) sum += lanes[j];
  for (; i < n; ++i) sum = std::fmaf(x[i], x[i], sum);
  return std::sqrt(sum);
}

// A strided column's norm: one chain of fused multiply-adds.
float NormOfColumn(const float* a, size_t rows, size_t cols, size_t c) {
  float sum = 0;
  for (size_t i = 0; i < rows; ++i) {
    sum = std::fmaf(a[i * cols + c], a[i * cols + c], sum);
  }
  return std::sqrt(sum);
}

// _orthogonalize_gram_schmidt with epsilon 0 on a row-major rows x cols
// matrix: each column divided by its norm (a true division), then projected
// out of the columns after it. Bitwise torch's for one column; for two,
// torch's sum of the projection is ATen's cascade, this one's in order.
void GramSchmidt(float* a, size_t rows, size_t cols) {
  for (size_t c = 0; c < cols; ++c) {
    const float norm =
        cols == 1 ? NormOfContiguous(a, rows) : NormOfColumn(a, rows, cols, c);
    for (size_t i = 0; i < rows; ++i) a[i * cols + c] /= norm;
    for (size_t d = c + 1; d < cols; ++d) {
      float dot = 0;
      for (size_t i = 0; i < rows; ++i)
        dot += a[i * cols + c] * a[i * cols + d];
      for (size_t i = 0; i < rows; ++i) {
        const float projection = dot * a[i * cols + c];
        a[i * cols + d] -= projection;
      }
    }
  }
}

// torch.linalg.qr(A, out=(A, R)): LAPACK's sgeqrf and sorgqr on the
// column-major copy, the Q factor written back.
void HouseholderQr(float* a, size_t rows, size_t cols) {
  const int m = static_cast<int>(rows), n = static_cast<int>(cols);
  std::vector<float> column_major(rows * cols), tau(cols);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j)
      column_major[j * rows + i] = a[i * cols + j];
  }
  int info = 0, query = -1;
  float size = 0;
  sgeqrf_(&m, &n, column_major.data(), &m, tau.data(), &size, &query, &info);
  std::vector<float> work(std::max<size_t>(1, static_cast<size_t>(size)));
  int lwork = static_cast<int>(work.size());
  sgeqrf_(&m, &n, column_major.data(), &m, tau.data(), work.data(), &lwork,
          &info);
  if (info != 0) throw std::runtime_error("powersgd: sgeqrf failed");
  sorgqr_(&m, &n, &n, column_major.data(), &m, tau.data(), &size, &query,
          &info);
  work.resize(std::max<size_t>(1, static_cast<size_t>(size)));
  lwork = static_cast<int>(work.size());
  sorgqr_(&m, &n, &n, column_major.data(), &m, tau.data(), work.data(), &lwork,
          &info);
  if (info != 0) throw std::runtime_error("powersgd: sorgqr failed");
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j)
      a[i * cols + j] = column_major[j * rows + i];
  }
}

// _orthogonalize: Gram-Schmidt up to rank 2, QR above.
void Orthogonalize(float* a, size_t rows, size_t cols) {
  if (cols <= 2) {
    GramSchmidt(a, rows, cols);
  } else {
    HouseholderQr(a, rows, cols);
  }
}

// A tensor of a bucket: where it is in the flat buffer and in the bucket's
// own (torch's bucket order), its matrix view and whether it is compressed
// (and where its P and Q slices are).
struct TensorPlan {
  size_t flat = 0, at = 0, n = 0, m = 0, rank = 0;
  bool compressed = false;
  size_t p = 0, q = 0, u = 0;
};

struct BucketPlan {
  size_t begin = 0, end = 0;        // in the flat buffer
  size_t side = 0;                  // batched: ceil(sqrt(size)), the square's
  std::vector<TensorPlan> tensors;  // bucket order
  std::vector<size_t> compressed;   // P/Q slice order: by shape, then bucket
  size_t u_size = 0, p_size = 0, q_size = 0;
  size_t size() const { return end - begin; }
};

BucketPlan PlanBucket(const Bucket& bucket, const PowerSgdOptions& options) {
  BucketPlan plan;
  plan.begin = bucket.begin;
  plan.end = bucket.end;
  size_t at = 0;
  std::vector<std::pair<size_t, size_t>> shapes;  // first appearance order
  for (const TensorSlot& slot : bucket.tensors) {
    TensorPlan t;
    t.flat = slot.offset;
    t.at = at;
    t.n = static_cast<size_t>(slot.shape[0]);
    t.m = slot.size / t.n;
    t.rank = std::min({t.n, t.m, static_cast<size_t>(options.rank)});
    t.compressed =
        static_cast<double>(t.n + t.m) * t.rank * options.min_compression_rate <
        static_cast<double>(t.n * t.m);
    if (t.compressed) {
      if (std::find(shapes.begin(), shapes.end(), std::make_pair(t.n, t.m)) ==
          shapes.end()) {
        shapes.emplace_back(t.n, t.m);
      }
    } else {
      t.u = plan.u_size;
      plan.u_size += slot.size;
    }
    at += slot.size;
    plan.tensors.push_back(t);
  }
  plan.side =
      static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(at))));
  for (const auto& shape : shapes) {
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      TensorPlan& t = plan.tensors[i];
      if (!t.compressed || std::make_pair(t.n, t.m) != shape) continue;
      t.p = plan.p_size;
      t.q = plan.q_size;
      plan.p_size += t.n * t.rank;
      plan.q_size += t.m * t.rank;
      plan.compressed.push_back(i);
    }
  }
  return plan;
}

class PowerSgdHook : public CommHook {
 public:
  PowerSgdHook(std::vector<Bucket> buckets, const PowerSgdOptions& options)
      : options_(options), counters_(4, 0.0f) {
    for (const Bucket& b : buckets) {
      plans_.push_back(PlanBucket(b, options));
      const BucketPlan& plan = plans_.back();
      const size_t r = static_cast<size_t>(options.rank);
      error_.emplace_back(options.batched ? plan.side * plan.side : plan.size(),
                          0.0f);
      q_.emplace_back(options.batched ? plan.side * r : plan.q_size, 0.0f);
      q_state_.emplace_back(plan.q_size, 0.0f);
    }
    has_error_.assign(plans_.size(), false);
    has_q_.assign(plans_.size(), false);
  }

  void Reduce(comm::Communicator& comm, const GradBucket& bucket,
              float* grads) override {
    if (iter_ < options_.start_iter) {
      // _allreduce_fut: divide, then sum (any layout: DDP's step 0 has one
      // bucket, before the rebuild these plans are for).
      DivideBy(comm.world_size(), grads + bucket.begin, bucket.count());
      comm.AllReduce(grads + bucket.begin, bucket.count(),
                     comm::ReduceOp::kSum);
    } else {
      const BucketPlan& plan = plans_.at(bucket.index);
      if (bucket.begin != plan.begin || bucket.end != plan.end) {
        throw std::logic_error("powersgd: a bucket it was not planned for");
      }
      if (options_.batched) {
        CompressBatched(comm, bucket.index, grads);
      } else {
        Compress(comm, bucket.index, grads);
      }
    }
    if (bucket.is_last) ++iter_;
  }

  // Its plain steps are; its compressed ones lay out U, P and Q in DDP's
  // tensor order themselves.
  bool elementwise() const override { return iter_ < options_.start_iter; }

  uint64_t BusBytes(const GradBucket& bucket, int world_size) const override {
    auto bus = [&](size_t n) {
      return comm::AllReduceBusBytes(n * sizeof(float), world_size);
    };
    if (iter_ < options_.start_iter) return bus(bucket.count());
    const BucketPlan& plan = plans_.at(bucket.index);
    if (options_.batched) {
      return 2 * bus(plan.side * static_cast<size_t>(options_.rank));
    }
    return bus(plan.u_size) + bus(plan.p_size) + bus(plan.q_size);
  }

  std::vector<SyncTensor> state() override {
    PutCount(static_cast<uint64_t>(iter_), &counters_[0]);
    PutCount(draws_, &counters_[2]);
    std::vector<SyncTensor> tensors = {{"powersgd_counters", &counters_}};
    for (size_t b = 0; b < plans_.size(); ++b) {
      tensors.push_back({"powersgd_error" + std::to_string(b), &error_[b]});
      q_state_[b].assign(q_[b].begin(), q_[b].end());
      tensors.push_back({"powersgd_q" + std::to_string(b), &q_state_[b]});
    }
    return tensors;
  }

  // After state() was read back: the step and the generator where they
  // were; every bucket has its error and Q once a compressed step is past.
  void Restored() override {
    iter_ = static_cast<int64_t>(GetCount(&counters_[0]));
    draws_ = GetCount(&counters_[2]);
    for (size_t b = 0; b < plans_.size(); ++b) {
      q_[b].assign(q_state_[b].begin(), q_state_[b].end());
    }
    seeds_.seed(0);
    seeds_.discard(draws_);
    const bool past = iter_ > options_.start_iter;
    has_error_.assign(plans_.size(), past && options_.error_feedback);
    has_q_.assign(plans_.size(), past && options_.warm_start);
  }

 private:
  // state.rng.randint(1_000_000_000) of numpy's RandomState(0): masked
  // 30-bit draws of its Mersenne Twister until one is below 10^9.
  uint32_t NextSeed() {
    uint32_t v;
    do {
      v = static_cast<uint32_t>(seeds_()) & 0x3fffffffu;
      ++draws_;
    } while (v > 999999999u);
    return v;
  }

  void Compress(comm::Communicator& comm, size_t b, float* grads);
  void CompressBatched(comm::Communicator& comm, size_t b, float* grads);
  // The bucket into x_ in torch's order, `padded` long (zeros after it),
  // with the error added (error feedback; the first time only created).
  void LoadBucket(size_t b, const float* grads, size_t padded);

  const PowerSgdOptions options_;
  std::vector<BucketPlan> plans_;
  std::vector<std::vector<float>> error_;
  std::vector<Floats> q_;
  std::vector<bool> has_error_, has_q_;
  Floats x_, u_, p_;  // scratch of one bucket
  std::vector<float> copy_;
  std::vector<float> counters_;  // iter_ and draws_, for state()
  // q_ as the checkpoints hold it (state() copies it, Restored() back).
  std::vector<std::vector<float>> q_state_;
  int64_t iter_ = 0;
  uint64_t draws_ = 0;
  std::mt19937 seeds_{0};
};

void PowerSgdHook::LoadBucket(size_t b, const float* grads, size_t padded) {
  const BucketPlan& plan = plans_[b];
  x_.assign(padded, 0.0f);
  for (const TensorPlan& t : plan.tensors) {
    std::copy(grads + t.flat, grads + t.flat + t.n * t.m, x_.begin() + t.at);
  }
  if (options_.error_feedback) {
    if (has_error_[b]) {
      for (size_t i = 0; i < x_.size(); ++i) x_[i] += error_[b][i];
    }
    has_error_[b] = true;
    copy_.assign(x_.begin(), x_.end());
  }
}

// batched_powerSGD_hook, its orthogonalisation given the 3-D batch of one
// that 1.13's asserts: the padded bucket as one s x s matrix.
void PowerSgdHook::CompressBatched(comm::Communicator& comm, size_t b,
                                   float* grads) {
  const BucketPlan& plan = plans_[b];
  const size_t s = plan.side, r = static_cast<size_t>(options_.rank);
  LoadBucket(b, grads, s * s);
  Floats& q = q_[b];
  if (!options_.warm_start || !has_q_[b]) {
    torch_compat::TorchGenerator randn(NextSeed());
    torch_compat::Randn(randn, q.data(), s * r);
  }
  has_q_[b] = options_.warm_start;
  Orthogonalize(q.data(), s, r);
  p_.resize(s * r);
  Gemm(false, false, s, r, s, x_.data(), s, q.data(), r, p_.data(), r);
  comm.AllReduce(p_.data(), p_.size(), comm::ReduceOp::kSum);
  Orthogonalize(p_.data(), s, r);
  Gemm(true, false, s, r, s, x_.data(), s, p_.data(), r, q.data(), r);
  comm.AllReduce(q.data(), q.size(), comm::ReduceOp::kSum);
  DivideBy(comm.world_size(), q.data(), q.size());
  Gemm(false, true, s, s, r, p_.data(), r, q.data(), r, x_.data(), s);
  if (options_.error_feedback) {
    for (size_t i = 0; i < x_.size(); ++i) error_[b][i] = copy_[i] - x_[i];
  }
  for (const TensorPlan& t : plan.tensors) {
    std::copy(x_.begin() + t.at, x_.begin() + t.at + t.n * t.m, grads + t.flat);
  }
}

void PowerSgdHook::Compress(comm::Communicator& comm, size_t b, float* grads) {
  const BucketPlan& plan = plans_[b];
  // The bucket in torch's order, with last step's error added.
  LoadBucket(b, grads, plan.size());
  // The uncompressed tensors: summed, then divided.
  u_.resize(plan.u_size);
  for (const TensorPlan& t : plan.tensors) {
    if (!t.compressed) {
      std::copy(x_.begin() + t.at, x_.begin() + t.at + t.n * t.m,
                u_.begin() + t.u);
    }
  }
  comm.AllReduce(u_.data(), u_.size(), comm::ReduceOp::kSum);
  DivideBy(comm.world_size(), u_.data(), u_.size());
  for (const TensorPlan& t : plan.tensors) {
    if (!t.compressed) {
      std::copy(u_.begin() + t.u, u_.begin() + t.u + t.n * t.m,
                x_.begin() + t.at);
    }
  }
  // Q: torch.randn after manual_seed(a fresh seed) the first time (every
  // time without warm start), else last step's; orthogonalised either way.
  Floats& q = q_[b];
  torch_compat::TorchGenerator randn;
  const bool fresh = !options_.warm_start || !has_q_[b];
  if (fresh) randn.ManualSeed(NextSeed());
  for (size_t i : plan.compressed) {
    const TensorPlan& t = plan.tensors[i];
    if (fresh) torch_compat::Randn(randn, q.data() + t.q, t.m * t.rank);
    Orthogonalize(q.data() + t.q, t.m, t.rank);
  }
  has_q_[b] = options_.warm_start;
  // P = M Q, summed (not divided: it is orthogonalised next).
  p_.resize(plan.p_size);
  for (size_t i : plan.compressed) {
    const TensorPlan& t = plan.tensors[i];
    Gemm(false, false, t.n, t.rank, t.m, x_.data() + t.at, t.m, q.data() + t.q,
         t.rank, p_.data() + t.p, t.rank);
  }
  comm.AllReduce(p_.data(), p_.size(), comm::ReduceOp::kSum);
  for (size_t i : plan.compressed) {
    const TensorPlan& t = plan.tensors[i];
    Orthogonalize(p_.data() + t.p, t.n, t.rank);
  }
  // Q = M^T P, summed and divided; then M = P Q^T.
  for (size_t i : plan.compressed) {
    const TensorPlan& t = plan.tensors[i];
    Gemm(true, false, t.m, t.rank, t.n, x_.data() + t.at, t.m, p_.data() + t.p,
         t.rank, q.data() + t.q, t.rank);
  }
  comm.AllReduce(q.data(), q.size(), comm::ReduceOp::kSum);
  DivideBy(comm.world_size(), q.data(), q.size());
  for (size_t i : plan.compressed) {
    const TensorPlan& t = plan.tensors[i];
    Gemm(false, true, t.n, t.m, t.rank, p_.data() + t.p, t.rank, q.data() + t.q,
         t.rank, x_.data() + t.at, t.m);
  }
  if (options_.error_feedback) {
    for (size_t i = 0; i < x_.size(); ++i) error_[b][i] = copy_[i] - x_[i];
  }
  for (const TensorPlan& t : plan.tensors) {
    std::copy(x_.begin() + t.at, x_.begin() + t.at + t.n * t.m, grads + t.flat);
  }
}

}  // namespace

void ValidatePowerSgd(const PowerSgdOptions& options) {
  if (options.rank < 1 || options.rank > 1024) {
    throw std::invalid_argument("--powersgd_rank must be in [1, 1024], not " +
                                std::to_string(options.rank));
  }
  if (options.start_iter < 1 ||
      (options.start_iter < 2 &&
       (options.error_feedback || options.warm_start))) {
    throw std::invalid_argument(
        "--powersgd_start_iter must be at least 2 with error feedback or warm "
        "start (DDP rebuilds its buckets after step 0, as torch says), and at "
        "least 1 without (step 0's one bucket is not compressed here), not " +
        std::to_string(options.start_iter));
  }
  if (!(options.min_compression_rate >= 1) ||
      !std::isfinite(options.min_compression_rate)) {
    throw std::invalid_argument(
        "--powersgd_min_compression_rate must be finite and at least 1");
  }
}

std::unique_ptr<CommHook> MakePowerSgdHook(const ParamLayout& layout,
                                           std::vector<Bucket> buckets,
                                           const PowerSgdOptions& options) {
  ValidatePowerSgd(options);
  for (const Bucket& b : buckets) CheckBucketInLayout(b, layout);
  return std::make_unique<PowerSgdHook>(std::move(buckets), options);
}

namespace {

PowerSgdOptions PowerSgdOptionsOf(const OptionValues& values) {
  PowerSgdOptions options;
  options.rank = static_cast<int>(values.Int("powersgd_rank"));
  options.start_iter = values.Int("powersgd_start_iter");
  options.min_compression_rate = values.Float("powersgd_min_compression_rate");
  options.error_feedback = values.Bool("powersgd_error_feedback");
  options.warm_start = values.Bool("powersgd_warm_start");
  options.batched = values.Bool("powersgd_batched");
  return options;
}

std::unique_ptr<Synchronizer> CreatePowerSgd(const SyncContext& c) {
  // The hook plans the reducer's own buckets: the model's gradients must be
  // in the communicator's memory (no staging of the whole buffer).
  if (!SharesMemory(c.comm, c.model)) {
    throw std::invalid_argument(
        "--sync=powersgd reduces the model's own gradients: --comm=" +
        std::string(c.comm.backend()) + " does not reach the model's memory");
  }
  return std::make_unique<DdpSynchronizer>(
      c.comm, c.model, c.options, c.tracer,
      MakePowerSgdHook(c.model.layout(),
                       DdpBuckets(c.model.layout(), c.options),
                       PowerSgdOptionsOf(c.options)));
}

SyncDescription DescribePowerSgd() {
  SyncDescription d;
  d.name = "powersgd";
  d.summary =
      "DDP with powerSGD_hook: each weight's gradient replaced by a rank-r "
      "approximation P Q^T, with error feedback";
  d.sends =
      "every step after powersgd_start_iter: P and Q (r (n + m) floats per "
      "n x m weight) and the small tensors whole";
  d.pytorch = "DistributedDataParallel.register_comm_hook(powerSGD_hook)";
  d.options = DdpOptions();
  d.options.push_back(
      IntOption("powersgd_rank", 1, 1, 1024, "matrix_approximation_rank"));
  d.options.push_back(IntOption(
      "powersgd_start_iter", 1000, 1, kMaxSteps,
      "steps of plain allreduce first (start_powerSGD_iter; at least 2 with "
      "error feedback or warm start)"));
  d.options.push_back(
      FloatOption("powersgd_min_compression_rate", 2, 1, false, 1e300, false,
                  "compress a matrix only if it shrinks this much"));
  d.options.push_back(BoolOption(
      "powersgd_error_feedback", true,
      "add what the approximation lost to the next step (use_error_feedback)"));
  d.options.push_back(
      BoolOption("powersgd_warm_start", true,
                 "start each step from the last step's Q (warm_start)"));
  d.options.push_back(
      BoolOption("powersgd_batched", false,
                 "batched_powerSGD_hook: each bucket one square matrix"));
  d.short_run = {{"powersgd_start_iter", "4"}};
  d.check = [](const OptionValues& v) {
    ValidatePowerSgd(PowerSgdOptionsOf(v));
  };
  d.create = CreatePowerSgd;
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribePowerSgd);

}  // namespace ringlab::sync
