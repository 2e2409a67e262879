#include "comm/adapters/mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "comm/call_agreement.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;

// MPI counts are int: larger buffers go in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;

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

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const CommOptions& options) : options_(options) {
    // tuning.mpi.check_calls false skips the call check:
    // bench/allreduce_bench's "mpi:check=0" measures plain MPI_Allreduce as
    // the anchor that other backends are compared with. Rank 0's choice is
    // every rank's (as shm_ring and ipc_ring take rank 0's tuning): ranks
    // that checked and ranks that did not would otherwise call different
    // numbers of MPI_Allreduce and hang or mix up their data.
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    int check = options.tuning.mpi.check_calls ? 1 : 0;
    const int code = MPI_Bcast(&check, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (code != MPI_SUCCESS) {
      throw CommError("mpi: MPI_Bcast (tuning) failed: " +
                      MpiErrorString(code));
    }
    check_calls_ = check != 0;
    watchdog_ = std::thread([this] { Watch(); });
  }
  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }

  const char* backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  uint64_t bytes_sent() const override { return bytes_sent_; }

  void AllReduce(float* data, size_t count, ReduceOp op) override {
    CheckAllReduceArguments("mpi", data, count, op);
    Arm("AllReduce");
    Agree(CallKind::kAllReduce, count, op, 0);
    for (size_t done = 0; done < count; done += kMaxPiece) {
      int n = static_cast<int>(std::min(kMaxPiece, count - done));
      Check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce");
    }
    if (op == ReduceOp::kAvg) {
      const float n = static_cast<float>(world_);
      for (size_t i = 0; i < count; ++i) data[i] /= n;
    }
    Disarm();
    bytes_sent_ += AllReduceBusBytes(count, world_);
  }

  void Broadcast(float* data, size_t count, int root) override {
    CheckBroadcastArguments("mpi", data, count, root, world_);
    Arm("Broadcast");
    Agree(CallKind::kBroadcast, count, ReduceOp::kSum, root);
    for (size_t done = 0; done < count; done += kMaxPiece) {
      int n = static_cast<int>(std::min(kMaxPiece, count - done));
      Check(MPI_Bcast(data + done, n, MPI_FLOAT, root, MPI_COMM_WORLD),
            "MPI_Bcast");
    }
    Disarm();
    bytes_sent_ += BroadcastBusBytes(count, world_);
  }

  void AllGather(const float* send, float* recv, size_t count) override {
    CheckAllGatherArguments("mpi", send, recv, count, rank_, world_);
    Arm("AllGather");
    Agree(CallKind::kAllGather, count, ReduceOp::kSum, 0);
    const bool in_place = send == recv + static_cast<size_t>(rank_) * count;
    for (size_t done = 0; done < count; done += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - done));
      // A piece of a larger block: one element of a type of n floats whose
      // extent is the whole block puts rank r's piece at r * count + done.
      MPI_Datatype piece = MPI_DATATYPE_NULL, block = MPI_FLOAT;
      if (static_cast<size_t>(n) != count) {
        MPI_Type_contiguous(n, MPI_FLOAT, &piece);
        MPI_Type_create_resized(
            piece, 0, static_cast<MPI_Aint>(count * sizeof(float)), &block);
        MPI_Type_commit(&block);
      }
      const int code = MPI_Allgather(
          in_place ? MPI_IN_PLACE : send + done, n, MPI_FLOAT, recv + done,
          block == MPI_FLOAT ? n : 1, block, MPI_COMM_WORLD);
      if (piece != MPI_DATATYPE_NULL) {
        MPI_Type_free(&block);
        MPI_Type_free(&piece);
      }
      Check(code, "MPI_Allgather");
    }
    Disarm();
    bytes_sent_ += AllGatherBusBytes(count, world_);
  }

  void Barrier() override {
    Arm("Barrier");
    Agree(CallKind::kBarrier, 0, ReduceOp::kSum, 0);
    Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    Disarm();
  }

 private:
  bool check_calls_ = true;
  // MPI itself does not notice ranks that disagree on a call's count, op or
  // root: it returns partial or wrong results. So every call first reduces
  // {desc, -desc} with MPI_MAX (one small MPI_Allreduce gives both the
  // maximum and the minimum of each field); any difference is reported on
  // every rank alike, before any data moves, so the ranks stay in step.
  void Agree(CallKind kind, size_t count, ReduceOp op, int root) {
    if (!check_calls_) return;
    const CallDescription call{static_cast<int64_t>(++calls_), kind, count, op,
                               root};
    int64_t buf[kAgreementWords];
    EncodeForAgreement(call, buf);
    static_assert(sizeof(long long) == sizeof(int64_t), "MPI_LONG_LONG");
    Check(MPI_Allreduce(MPI_IN_PLACE, buf, kAgreementWords, MPI_LONG_LONG,
                        MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce (call check)");
    try {
      ThrowUnlessAgreed("mpi", rank_, call, buf);
    } catch (...) {
      Disarm();
      throw;
    }
  }

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
      if (running > options_.timeout) {
        std::fprintf(stderr,
                     "mpi: rank %d timed out after %.1f s in %s; aborting the "
                     "job\n",
                     rank_,
                     std::chrono::duration<double>(options_.timeout).count(),
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

  CommOptions options_;
  int rank_ = 0, world_ = 1;
  uint64_t bytes_sent_ = 0;
  uint64_t calls_ = 0;
  std::atomic<int64_t> started_ns_{0};
  std::atomic<const char*> what_{""};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread watchdog_;
};

const bool kRegistered = RegisterCommunicator(
    "mpi", [](const RankContext& context, const CommOptions& options) {
      return CreateMpiCommunicator(context, options);
    });

}  // namespace

std::unique_ptr<Communicator> CreateMpiCommunicator(
    const RankContext& context, const CommOptions& options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // Without mpirun, MPI would start a singleton world of 1 (slowly, and
    // then disagree with the job): refuse early with a clear message.
    if (context.world_size > 1 &&
        std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr &&
        std::getenv("PMI_SIZE") == nullptr &&
        std::getenv("PMIX_RANK") == nullptr) {
      throw CommError("mpi: " + std::to_string(context.world_size) +
                      " ranks were not started by mpirun; run under `mpirun "
                      "-np N` for the mpi backend");
    }
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
  auto comm = std::make_unique<MpiCommunicator>(options);
  if (context.world_size > 1 && comm->world_size() != context.world_size) {
    throw CommError(
        "mpi: MPI_COMM_WORLD has " + std::to_string(comm->world_size()) +
        " ranks but the job has " + std::to_string(context.world_size));
  }
  return comm;
}

}  // namespace ringlab::comm
