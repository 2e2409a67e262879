#include "comm/adapters/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/backend.h"
#include "comm/dtype/kernels.h"
#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are int: larger buffers go in pieces, fn(offset, length) each.
constexpr size_t kMaxPiece = size_t{1} << 30;
template <typename Fn>
void ForEachPiece(size_t count, Fn fn) {
  for (size_t done = 0; done < count; done += kMaxPiece) {
    fn(done, static_cast<int>(std::min(kMaxPiece, count - done)));
  }
}

std::string MpiErrorString(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  return std::string(msg, static_cast<size_t>(len));
}

bool g_we_initialised = false;
// Whether MPI allows calls from any thread: the watchdog's MPI_Abort needs it.
bool g_thread_multiple = false;

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// MPI's user op for a 16-bit type (its elements are MPI's 2-byte contiguous
// type): inout = in op inout, through comm/dtype's kernels, rounded once per
// application, that is, after every partial sum of MPI's algorithm.
template <DataType kType, ReduceOp kOp>
void Reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const dtype::ElementKernels& k = dtype::KernelsFor(kType);
  const auto reduce = kOp == ReduceOp::kMax   ? k.maximum
                      : kOp == ReduceOp::kMin ? k.minimum
                                              : k.add;
  reduce(inout, inout, in, static_cast<size_t>(*len));
}

// MPI's element type and op for ours: MPI_FLOAT and its own ops for
// float32; a 2-byte contiguous type and user ops for the 16-bit types (MPI
// has no bfloat16, and its float16 is an extension Open MPI 4.1 lacks).
// Made once, after MPI_Init.
class MpiTypes {
 public:
  MpiTypes() {
    MPI_Type_contiguous(2, MPI_BYTE, &two_bytes_);
    MPI_Type_commit(&two_bytes_);
    MPI_Op_create(&Reduce16<DataType::kFloat16, ReduceOp::kSum>, 1,
                  &ops_[0][0]);
    MPI_Op_create(&Reduce16<DataType::kFloat16, ReduceOp::kMax>, 1,
                  &ops_[0][1]);
    MPI_Op_create(&Reduce16<DataType::kFloat16, ReduceOp::kMin>, 1,
                  &ops_[0][2]);
    MPI_Op_create(&Reduce16<DataType::kBFloat16, ReduceOp::kSum>, 1,
                  &ops_[1][0]);
    MPI_Op_create(&Reduce16<DataType::kBFloat16, ReduceOp::kMax>, 1,
                  &ops_[1][1]);
    MPI_Op_create(&Reduce16<DataType::kBFloat16, ReduceOp::kMin>, 1,
                  &ops_[1][2]);
  }
  MPI_Datatype Type(DataType type) const {
    return type == DataType::kFloat32 ? MPI_FLOAT : two_bytes_;
  }
  MPI_Op Op(DataType type, ReduceOp op) const {
    const int which = op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0;
    if (type != DataType::kFloat32) {
      return ops_[type == DataType::kFloat16 ? 0 : 1][which];
    }
    return which == 1 ? MPI_MAX : which == 2 ? MPI_MIN : MPI_SUM;
  }

 private:
  MPI_Datatype two_bytes_ = MPI_DATATYPE_NULL;
  MPI_Op ops_[2][3] = {};
};

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(std::chrono::milliseconds timeout) : timeout_(timeout) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    watchdog_ = std::thread([this] { Watch(); });
  }
  ~MpiBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  int world_size() const { return world_; }

  void AllReduce(void* data, size_t count, DataType type,
                 ReduceOp op) override {
    Arm("AllReduce");
    auto* x = static_cast<char*>(data);
    const size_t size = DataTypeSize(type);
    ForEachPiece(count, [&](size_t done, int n) {
      Check(MPI_Allreduce(MPI_IN_PLACE, x + done * size, n, types_.Type(type),
                          types_.Op(type, op), MPI_COMM_WORLD),
            "MPI_Allreduce");
    });
    // The sum, divided once (rounded once more for the 16-bit types).
    if (op == ReduceOp::kAvg) {
      dtype::KernelsFor(type).scale(data, static_cast<float>(world_), count);
    }
    Disarm();
  }

  void Broadcast(void* data, size_t count, DataType type, int root) override {
    Arm("Broadcast");
    auto* x = static_cast<char*>(data);
    const size_t size = DataTypeSize(type);
    ForEachPiece(count, [&](size_t done, int n) {
      Check(MPI_Bcast(x + done * size, n, types_.Type(type), root,
                      MPI_COMM_WORLD),
            "MPI_Bcast");
    });
    Disarm();
  }

  void AllGather(const void* send_buffer, void* recv_buffer, size_t count,
                 DataType type) override {
    Arm("AllGather");
    const size_t size = DataTypeSize(type);
    const MPI_Datatype element = types_.Type(type);
    const auto* send = static_cast<const char*>(send_buffer);
    auto* recv = static_cast<char*>(recv_buffer);
    const bool in_place =
        send == recv + static_cast<size_t>(rank_) * count * size;
    ForEachPiece(count, [&](size_t done, int n) {
      // A piece of a larger block: one element of a type of n elements whose
      // extent is the whole block puts rank r's piece at r * count + done.
      MPI_Datatype piece = MPI_DATATYPE_NULL, block = element;
      if (static_cast<size_t>(n) != count) {
        MPI_Type_contiguous(n, element, &piece);
        MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(count * size),
                                &block);
        MPI_Type_commit(&block);
      }
      const int code = MPI_Allgather(
          in_place ? MPI_IN_PLACE : send + done * size, n, element,
          recv + done * size, block == element ? n : 1, block, MPI_COMM_WORLD);
      if (piece != MPI_DATATYPE_NULL) {
        MPI_Type_free(&block);
        MPI_Type_free(&piece);
      }
      Check(code, "MPI_Allgather");
    });
    Disarm();
  }

  // MPI_Reduce_scatter_block, whose count is an int: a larger block (over
  // 2^31 elements) reduces a copy with AllReduce instead.
  void ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op) override {
    const size_t bytes = count * DataTypeSize(type);
    const auto* all = static_cast<const char*>(send);
    if (count > static_cast<size_t>(std::numeric_limits<int>::max())) {
      std::vector<char> copy(all, all + bytes * world_);
      AllReduce(copy.data(), count * world_, type, op);
      std::memcpy(recv, copy.data() + bytes * rank_, bytes);
      return;
    }
    Arm("ReduceScatter");
    // In place, recv is inside send: MPI's own in-place form differs (the
    // result at the buffer's start), so the block lands in a copy first.
    const bool in_place = recv == all + bytes * rank_;
    std::vector<char> block(in_place ? bytes : 0);
    Check(MPI_Reduce_scatter_block(send, in_place ? block.data() : recv,
                                   static_cast<int>(count), types_.Type(type),
                                   types_.Op(type, op), MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
    if (in_place) std::memcpy(recv, block.data(), bytes);
    if (op == ReduceOp::kAvg) {
      dtype::KernelsFor(type).scale(recv, static_cast<float>(world_), count);
    }
    Disarm();
  }

  void Barrier() override {
    Arm("Barrier");
    Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    Disarm();
  }

  // Open MPI's TCP transport writes what a socket did not take at the next
  // MPI call: a rank whose MPI_Bcast returned could leave a peer inside its
  // own for as long as the front's check waits (seen: 30 s, at 2 ranks on
  // each of 2 emulated hosts). MPI_Iprobe runs Open MPI's progress engine.
  bool MovesDataOnlyInsideCalls() const override { return true; }
  void Progress() override {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
               MPI_STATUS_IGNORE);
  }

  // The front's call check: MPI itself returns partial or wrong results for
  // ranks that disagree on a call's count, op or root.
  void MaxOverRanks(int64_t* words, size_t count) override {
    Arm("a call check");
    static_assert(sizeof(long long) == sizeof(int64_t), "MPI_LONG_LONG");
    Check(MPI_Allreduce(MPI_IN_PLACE, words, static_cast<int>(count),
                        MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce (call check)");
    Disarm();
  }

 private:
  void Check(int code, const char* what) {
    if (code != MPI_SUCCESS) {
      Disarm();
      throw CommError(std::string("mpi: ") + what +
                      " failed: " + MpiErrorString(code));
    }
  }
  // One relaxed store per call: the watchdog must not cost latency.
  void Arm(const char* what) {
    what_.store(what, std::memory_order_relaxed);
    started_ns_.store(Clock::now().time_since_epoch().count(),
                      std::memory_order_relaxed);
  }
  void Disarm() { started_ns_.store(0, std::memory_order_relaxed); }

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100),
                         [this] { return stop_; })) {
      int64_t t = started_ns_.load(std::memory_order_relaxed);
      if (t == 0) continue;
      auto running = Clock::now() - Clock::time_point(Clock::duration(t));
      if (running > timeout_) {
        std::fprintf(stderr,
                     "mpi: rank %d timed out after %.1f s in %s; aborting the "
                     "job\n",
                     rank_, std::chrono::duration<double>(timeout_).count(),
                     what_.load());
        std::fflush(stderr);
        // MPI_Abort from this thread is only allowed with
        // MPI_THREAD_MULTIPLE; otherwise exit: mpirun then stops the job,
        // as for any rank that exits non-zero without MPI_Finalize.
        if (g_thread_multiple) MPI_Abort(MPI_COMM_WORLD, 1);
        std::_Exit(1);
      }
    }
  }

  const std::chrono::milliseconds timeout_;
  const MpiTypes types_;
  int rank_ = 0, world_ = 1;
  std::atomic<int64_t> started_ns_{0};
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

// Open MPI's TCP transport listens on every interface (4.1 has no setting
// that binds it to one): where the job met its peers through a store, and
// they all run on this host, it is not loaded at all (shared memory does
// the job); across hosts it is told to use the job's interface only
// (btl_tcp_if_include), though it still listens on all (README: threat
// model). A user's own setting of either stands.
void KeepMpiOffOtherInterfaces(const RankContext& context) {
  if (static_cast<int>(context.peers.size()) != context.world_size) return;
  const PeerInfo& self = context.peers[context.rank];
  bool one_host = true;
  for (const PeerInfo& peer : context.peers) one_host &= peer.host == self.host;
  if (one_host) {
    setenv(launch::kOmpiBtl, "self,vader", /*overwrite=*/0);
  } else {
    KeepDataSocketsOnJobInterface(self.address, launch::kOmpiBtlTcpIfInclude);
  }
}

// Calls MPI_Init_thread unless MPI is already initialised (then MPI_Finalize
// is left to whoever initialised it). Throws CommError when MPI's world does
// not match the job's (e.g. ranks started without mpirun).
std::unique_ptr<Backend> CreateMpiBackend(const RankContext& context,
                                          const CommOptions& options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // Without mpirun, MPI would start a singleton world of 1 (slowly, and
    // then disagree with the job): refuse early with a clear message.
    if (context.world_size > 1 && std::getenv(launch::kOmpiSize) == nullptr &&
        std::getenv(launch::kPmiSize) == nullptr &&
        std::getenv(launch::kPmixRank) == nullptr) {
      throw CommError("mpi: " + std::to_string(context.world_size) +
                      " ranks were not started by mpirun; run under `mpirun "
                      "-np N` for the mpi backend");
    }
    KeepMpiOffOtherInterfaces(context);
    // MULTIPLE so that the watchdog thread may call MPI_Abort; an MPI built
    // without it still works (the watchdog then exits instead).
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError("mpi: MPI_Init failed: " + MpiErrorString(rc));
    }
    if (provided < MPI_THREAD_FUNNELED) {
      throw CommError("mpi: MPI provides no thread support (level " +
                      std::to_string(provided) + ")");
    }
    if (!g_we_initialised) {
      g_we_initialised = true;
      std::atexit(FinalizeAtExit);
    }
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  g_thread_multiple = level >= MPI_THREAD_MULTIPLE;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  auto backend = std::make_unique<MpiBackend>(options.timeout);
  if (context.world_size > 1 && backend->world_size() != context.world_size) {
    throw CommError(
        "mpi: MPI_COMM_WORLD has " + std::to_string(backend->world_size()) +
        " ranks but the job has " + std::to_string(context.world_size));
  }
  return backend;
}

BackendDescription Description() {
  BackendDescription d;
  d.name = "mpi";
  d.summary =
      "Open MPI's MPI_Allreduce, MPI_Bcast, MPI_Allgather, "
      "MPI_Reduce_scatter_block on MPI_COMM_WORLD";
  d.memory = MemoryKind::kHost;
  d.launch = RankLaunch::kMpirun;
  d.spans_hosts = true;
  d.needs_store = false;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  // 16-bit sums rounded at every application of the user op (after each
  // partial sum of MPI's algorithm), the average divided once more.
  d.types = AllDataTypes();
  d.checks_calls = false;   // MPI returns wrong results on a mismatch
  d.reduce_scatter = true;  // MPI_Reduce_scatter_block
  d.conformance.survives_peer_death = false;
  d.create = CreateMpiBackend;
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
