// demo: DeMo (decoupled momentum; Peng, Quesnelle and Kingma, 2024). No
// gradient is averaged: each rank keeps a momentum, m = decay * m + g; per
// tensor it takes m's DCT-II (orthonormal) in chunks of demo_chunk x
// demo_chunk (a 1-D tensor: demo_chunk), keeps each chunk's demo_topk
// largest coefficients (ties to the lower position) and takes their inverse
// transform out of m. The ranks gather every rank's coefficients; where
// several chose one, their mean is taken (as the authors' scatter_reduce
// "mean"), the inverse transform gives the update, and the gradient the local
// optimiser applies becomes its sign.
//
// As the authors' code, a chunk side is the largest divisor of the tensor's
// side at most demo_chunk, and the transforms are float32 matrix products
// (Gemm: torch.matmul's bits). Unlike it, the momentum adds the gradient
// unscaled (the authors' adds lr * g; a synchroniser does not see the
// learning rate: under a constant one the same but for rounding), and a
// coefficient's position travels as 2 bytes, not 8.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/ddp.h"
#include "sync/matmul.h"
#include "sync/synchronizer.h"

namespace ringlab::sync {
namespace {

// A tensor as rows x cols, cut into chunks of n1 x n2 (a 1-D tensor: one
// row per chunk of n2, n1 = 1).
struct TensorDct {
  size_t offset = 0, rows = 0, cols = 0, n1 = 1, n2 = 1, k = 0;
  bool matrix = false;
  size_t chunks() const { return (rows / n1) * (cols / n2); }
};

size_t LargestDivisorUpTo(size_t n, size_t limit) {
  for (size_t d = std::min(n, limit); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// The orthonormal DCT-II basis, F[h][b] = s_b cos(pi (2h + 1) b / 2n), in
// double, rounded once.
std::vector<float> DctBasis(size_t n, bool transposed) {
  std::vector<float> f(n * n);
  const double pi = std::acos(-1.0);
  for (size_t h = 0; h < n; ++h) {
    for (size_t b = 0; b < n; ++b) {
      const double s = b == 0 ? std::sqrt(1.0 / n) : std::sqrt(2.0 / n);
      const auto v = static_cast<float>(
          s * std::cos(pi * static_cast<double>(2 * h + 1) * b / (2.0 * n)));
      f[transposed ? b * n + h : h * n + b] = v;
    }
  }
  return f;
}

class DeMoSynchronizer : public Synchronizer {
 public:
  explicit DeMoSynchronizer(const SyncContext& c);
  void AfterBackward(ModelBuffers& model, int64_t step) override;
  void AfterStep(ModelBuffers&, int64_t) override {}
  std::vector<SyncTensor> state() override {
    return {{"demo_momentum", &momentum_}};
  }

 private:
  const std::vector<float>& Basis(size_t n, bool transposed);
  // x (the tensor) to its coefficients, chunk by chunk, and back.
  void Forward(const TensorDct& t, const float* x, float* coef);
  void Inverse(const TensorDct& t, const float* coef, float* x);
  void Select(const TensorDct& t, const float* coef, char* wire);

  comm::Communicator& comm_;
  trace::Tracer& tracer_;
  const float decay_;
  const size_t count_;
  std::vector<TensorDct> tensors_;
  std::vector<std::vector<float>> bases_;  // by n, then transposed
  std::vector<size_t> basis_n_;
  size_t wire_bytes_ = 0;
  std::vector<float> momentum_, grads_, coef_, sparse_, scratch_, counts_;
  std::vector<uint32_t> order_;
  float* wire_ = nullptr;  // the communicator's registered memory
  std::vector<char> gathered_;
};

constexpr size_t kEntryBytes = sizeof(uint16_t) + sizeof(float);

DeMoSynchronizer::DeMoSynchronizer(const SyncContext& c)
    : comm_(c.comm),
      tracer_(c.tracer),
      decay_(static_cast<float>(c.options.Float("demo_decay"))),
      count_(c.model.layout().num_params()),
      momentum_(count_, 0.0f),
      grads_(count_),
      coef_(count_),
      sparse_(count_),
      scratch_(count_),
      counts_(count_) {
  const auto chunk = static_cast<size_t>(c.options.Int("demo_chunk"));
  const auto topk = static_cast<size_t>(c.options.Int("demo_topk"));
  for (const TensorSlot& s : c.model.layout().tensors()) {
    TensorDct t;
    t.offset = s.offset;
    t.matrix = s.shape.size() > 1;
    t.rows = t.matrix ? static_cast<size_t>(s.shape[0]) : 1;
    if (s.size == 0) continue;
    t.cols = t.matrix ? s.size / t.rows : s.size;
    t.n1 = t.matrix ? LargestDivisorUpTo(t.rows, chunk) : 1;
    t.n2 = LargestDivisorUpTo(t.cols, chunk);
    t.k = std::min(topk, t.n1 * t.n2);
    wire_bytes_ += t.chunks() * t.k * kEntryBytes;
    tensors_.push_back(t);
  }
  wire_bytes_ = (wire_bytes_ + 3) / 4 * 4;
  wire_ = c.comm.Allocate(std::max<size_t>(1, wire_bytes_ / 4));
  gathered_.resize(wire_bytes_ * static_cast<size_t>(c.comm.world_size()));
}

const std::vector<float>& DeMoSynchronizer::Basis(size_t n, bool transposed) {
  for (size_t i = 0; i < basis_n_.size(); ++i) {
    if (basis_n_[i] == n) return bases_[2 * i + (transposed ? 1 : 0)];
  }
  basis_n_.push_back(n);
  bases_.push_back(DctBasis(n, false));
  bases_.push_back(DctBasis(n, true));
  return bases_[bases_.size() - (transposed ? 1 : 2)];
}

// coef = F1^T x F2 per chunk: x (rows*cols/n2 x n2) times F2 in one product,
// then each band of n1 rows by F1^T (a 1-D tensor: the first product only).
void DeMoSynchronizer::Forward(const TensorDct& t, const float* x,
                               float* coef) {
  const std::vector<float>& f2 = Basis(t.n2, false);
  float* z = t.matrix ? scratch_.data() + t.offset : coef;
  Gemm(false, false, t.rows * t.cols / t.n2, t.n2, t.n2, x, t.n2, f2.data(),
       t.n2, z, t.n2);
  if (!t.matrix) return;
  const std::vector<float>& f1t = Basis(t.n1, true);
  for (size_t band = 0; band < t.rows / t.n1; ++band) {
    const size_t at = band * t.n1 * t.cols;
    Gemm(false, false, t.n1, t.cols, t.n1, f1t.data(), t.n1, z + at, t.cols,
         coef + at, t.cols);
  }
}

// x = F1 coef F2^T per chunk: the bands by F1, then the rows by F2^T.
void DeMoSynchronizer::Inverse(const TensorDct& t, const float* coef,
                               float* x) {
  const float* z = coef;
  if (t.matrix) {
    const std::vector<float>& f1 = Basis(t.n1, false);
    for (size_t band = 0; band < t.rows / t.n1; ++band) {
      const size_t at = band * t.n1 * t.cols;
      Gemm(false, false, t.n1, t.cols, t.n1, f1.data(), t.n1, coef + at, t.cols,
           scratch_.data() + t.offset + at, t.cols);
    }
    z = scratch_.data() + t.offset;
  }
  const std::vector<float>& f2t = Basis(t.n2, true);
  Gemm(false, false, t.rows * t.cols / t.n2, t.n2, t.n2, z, t.n2, f2t.data(),
       t.n2, x, t.n2);
}

// Each chunk's k largest |coef| into the wire as (position in the chunk,
// value), and into sparse_ at their places (this rank's transmitted part).
void DeMoSynchronizer::Select(const TensorDct& t, const float* coef,
                              char* wire) {
  const size_t size = t.n1 * t.n2;
  order_.resize(size);
  std::vector<float> chunk(size);
  float* own = sparse_.data() + t.offset;
  std::fill(own, own + t.rows * t.cols, 0.0f);
  for (size_t bi = 0; bi < t.rows / t.n1; ++bi) {
    for (size_t bj = 0; bj < t.cols / t.n2; ++bj) {
      const size_t base = bi * t.n1 * t.cols + bj * t.n2;
      for (size_t b = 0; b < t.n1; ++b) {
        std::memcpy(&chunk[b * t.n2], coef + base + b * t.cols,
                    t.n2 * sizeof(float));
      }
      std::iota(order_.begin(), order_.end(), uint32_t{0});
      std::partial_sort(order_.begin(), order_.begin() + t.k, order_.end(),
                        [&chunk](uint32_t a, uint32_t b) {
                          const float x = std::fabs(chunk[a]),
                                      y = std::fabs(chunk[b]);
                          return x > y || (x == y && a < b);
                        });
      for (size_t j = 0; j < t.k; ++j) {
        const uint32_t p = order_[j];
        const auto position = static_cast<uint16_t>(p);
        std::memcpy(wire, &position, sizeof(position));
        std::memcpy(wire + sizeof(position), &chunk[p], sizeof(float));
        wire += kEntryBytes;
        own[base + (p / t.n2) * t.cols + p % t.n2] = chunk[p];
      }
    }
  }
}

void DeMoSynchronizer::AfterBackward(ModelBuffers& model, int64_t) {
  model.GetGrads(grads_.data());
  for (size_t i = 0; i < count_; ++i) {
    momentum_[i] = momentum_[i] * decay_ + grads_[i];  // two roundings
  }
  char* wire = reinterpret_cast<char*>(wire_);
  std::memset(wire, 0, wire_bytes_);
  char* at = wire;
  for (const TensorDct& t : tensors_) {
    Forward(t, momentum_.data() + t.offset, coef_.data() + t.offset);
    Select(t, coef_.data() + t.offset, at);
    at += t.chunks() * t.k * kEntryBytes;
    // What this rank sent, in parameter space, leaves its momentum.
    Inverse(t, sparse_.data() + t.offset, grads_.data() + t.offset);
    for (size_t i = t.offset; i < t.offset + t.rows * t.cols; ++i) {
      momentum_[i] -= grads_[i];
    }
  }
  {
    trace::ScopedSpan wait = WaitSpan(tracer_, "wait for allgather");
    trace::ScopedSpan gather(tracer_, trace::Track::kComm,
                             "allgather dct coefficients", "comm",
                             static_cast<int64_t>(comm::AllGatherBusBytes(
                                 wire_bytes_, comm_.world_size())));
    comm_.AllGather(wire_, gathered_.data(), wire_bytes_ / 4,
                    comm::DataType::kFloat32);
  }
  // Every rank's coefficients summed in rank order, then each position's
  // mean over the ranks that sent it.
  std::fill(sparse_.begin(), sparse_.end(), 0.0f);
  std::fill(counts_.begin(), counts_.end(), 0.0f);
  for (int r = 0; r < comm_.world_size(); ++r) {
    const char* theirs = gathered_.data() + r * wire_bytes_;
    for (const TensorDct& t : tensors_) {
      for (size_t c = 0; c < t.chunks(); ++c) {
        const size_t bi = c / (t.cols / t.n2), bj = c % (t.cols / t.n2);
        const size_t base = t.offset + bi * t.n1 * t.cols + bj * t.n2;
        for (size_t j = 0; j < t.k; ++j, theirs += kEntryBytes) {
          uint16_t p;
          float v;
          std::memcpy(&p, theirs, sizeof(p));
          std::memcpy(&v, theirs + sizeof(p), sizeof(v));
          const size_t at_coef = base + (p / t.n2) * t.cols + p % t.n2;
          sparse_[at_coef] += v;
          counts_[at_coef] += 1.0f;
        }
      }
    }
  }
  for (size_t i = 0; i < count_; ++i) {
    if (counts_[i] > 0.0f) sparse_[i] /= counts_[i];
  }
  for (const TensorDct& t : tensors_) {
    Inverse(t, sparse_.data() + t.offset, grads_.data() + t.offset);
  }
  for (float& g : grads_) g = static_cast<float>((g > 0.0f) - (g < 0.0f));
  model.SetGrads(grads_.data());
}

SyncDescription DescribeDeMo() {
  SyncDescription d;
  d.name = "demo";
  d.summary =
      "DeMo: a momentum per rank, its chunks' largest DCT coefficients "
      "gathered and taken out of it, the sign of their inverse applied";
  d.sends =
      "every step: demo_topk coefficients per chunk of a tensor, 6 bytes "
      "each (a 2-byte position and a float32), from every rank to every rank";
  d.pytorch = "none (a PyTorch loop: experiments/fashion_mnist/pytorch_ddp.py)";
  d.options = {FloatOption("demo_decay", 0.999, 0, false, 1, true,
                           "the momentum's decay (compression_decay)"),
               IntOption("demo_chunk", 64, 1, 256,
                         "the largest chunk side (compression_chunk)"),
               IntOption("demo_topk", 32, 1, 65536,
                         "coefficients each chunk sends (compression_topk)")};
  d.create = [](const SyncContext& c) -> std::unique_ptr<Synchronizer> {
    RequireHostMemory(c.comm, "--sync=demo gathers");
    return std::make_unique<DeMoSynchronizer>(c);
  };
  return d;
}

}  // namespace

RINGLAB_REGISTER_SYNC(DescribeDeMo);

}  // namespace ringlab::sync
