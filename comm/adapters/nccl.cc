#include "comm/adapters/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "comm/call_agreement.h"
#include "comm/cuda_support.h"
#include "comm/peer_watch.h"
#include "comm/poll_pacer.h"
#include "comm/store/hex.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "nccl";
using Clock = std::chrono::steady_clock;

// Each process creates its communicators in the same order on every rank, so
// a process-wide counter gives them matching, distinct store prefixes.
std::atomic<int> g_instances{0};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout),
        join_timeout_(options.join_timeout) {
    if (context.store == nullptr && world_size_ > 1) {
      throw CommError("nccl: needs a rendezvous store for the unique id");
    }
    const std::string prefix =
        "nccl/" + std::to_string(g_instances.fetch_add(1));
    device_ = SelectCudaDevice(options, context.local_rank, kName);
    try {
      Init(context, prefix);
    } catch (...) {
      Release();
      throw;
    }
  }

  ~NcclCommunicator() override { Release(); }

  const char* backend() const override { return kName; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  uint64_t bytes_sent() const override { return bytes_sent_; }

  void AllReduce(float* data, size_t count, ReduceOp op) override {
    CheckUsable("AllReduce");
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("nccl: AllReduce of null data");
    }
    if (count == 0) return;
    const std::string what = std::string("AllReduce(") + ReduceOpName(op) +
                             ") of " + std::to_string(count) + " floats";
    Issue(what, ncclAllReduce(data, data, count, ncclFloat,
                              op == ReduceOp::kAvg ? ncclAvg : ncclSum, comm_,
                              stream_));
    Wait(what, timeout_);
    bytes_sent_ += AllReduceBusBytes(count, world_size_);
  }

  void Broadcast(float* data, size_t count, int root) override {
    CheckUsable("Broadcast");
    if (root < 0 || root >= world_size_) {
      throw std::invalid_argument("nccl: Broadcast root " +
                                  std::to_string(root) + " out of range");
    }
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("nccl: Broadcast of null data");
    }
    if (count == 0) return;
    const std::string what = "Broadcast of " + std::to_string(count) +
                             " floats from rank " + std::to_string(root);
    Issue(what,
          ncclBroadcast(data, data, count, ncclFloat, root, comm_, stream_));
    Wait(what, timeout_);
    bytes_sent_ += BroadcastBusBytes(count, world_size_);
  }

  void AllGather(const float* send, float* recv, size_t count) override {
    CheckUsable("AllGather");
    CheckAllGatherArguments(kName, send, recv, count, rank_, world_size_);
    if (count == 0) return;
    // In place (send is this rank's block of recv) as NCCL itself allows.
    const std::string what =
        "AllGather of " + std::to_string(count) + " floats per rank";
    Issue(what, ncclAllGather(send, recv, count, ncclFloat, comm_, stream_));
    Wait(what, timeout_);
    bytes_sent_ += AllGatherBusBytes(count, world_size_);
  }

  void Barrier() override {
    CheckUsable("Barrier");
    // An allreduce of one float: returns on a rank only once every rank has
    // entered it.
    Issue("Barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum,
                                   comm_, stream_));
    Wait("Barrier", timeout_);
  }

 private:
  void Init(const RankContext& context, const std::string& prefix) {
    CudaCheck(cudaStreamCreate(&stream_), kName, "cudaStreamCreate");
    CudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), kName,
              "cudaEventCreate");
    CudaCheck(cudaMalloc(&scratch_, sizeof(float)), kName, "cudaMalloc");

    ncclUniqueId id;
    if (world_size_ > 1) {
      peers_ =
          PeerWatch(context.store, prefix, rank_, world_size_, join_timeout_);
      CheckDistinctDevices(context.store, prefix);
      if (rank_ == 0) {
        NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
        context.store->Set(prefix + "/unique_id", ToHex(&id, sizeof(id)));
      } else {
        std::string hex =
            context.store->Get(prefix + "/unique_id", join_timeout_);
        if (!FromHex(hex, &id, sizeof(id))) {
          throw CommError("nccl: malformed unique id in the store");
        }
      }
    } else {
      NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }

    // Non-blocking: ncclCommInitRank would wait forever for a rank that
    // never arrives; this way the deadline applies to creation too.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t result =
        ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config);
    if (result != ncclSuccess && result != ncclInProgress) {
      comm_ = nullptr;
      NcclCheck(result, "ncclCommInitRankConfig");
    }
    // Creation's own deadline, not the collectives' (often much shorter).
    Wait("ncclCommInitRank (all " + std::to_string(world_size_) +
             " ranks joining)",
         join_timeout_);
  }

  // NCCL refuses two ranks on one GPU with a terse "Duplicate GPU detected";
  // compare devices first so that the message says what to do instead. A
  // device is its host (with PID namespace, see HostIdentity) plus its PCI
  // bus id: GPUs of different hosts may share a bus id.
  void CheckDistinctDevices(Store* store, const std::string& prefix) {
    char bus_id[64] = {};
    CudaCheck(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_), kName,
              "cudaDeviceGetPCIBusId");
    const std::string ours = HostIdentity() + " " + bus_id;
    store->Set(prefix + "/bus/" + std::to_string(rank_), ours);
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      std::string other =
          store->Get(prefix + "/bus/" + std::to_string(r), join_timeout_);
      if (other == ours) {
        throw CommError("nccl: ranks " + std::to_string(std::min(r, rank_)) +
                        " and " + std::to_string(std::max(r, rank_)) +
                        " share GPU " + bus_id +
                        "; NCCL needs one GPU per rank (use ipc_ring, or "
                        "world size 1, on a machine with fewer GPUs)");
      }
    }
  }

  // `detail`: NCCL's last error, when the caller had to read it before an
  // Abort() released the communicator; else it is read here.
  void NcclCheck(ncclResult_t result, const std::string& what,
                 std::string detail = "") {
    if (result == ncclSuccess) return;
    std::string msg = "nccl: " + what + " failed on rank " +
                      std::to_string(rank_) + ": " + ncclGetErrorString(result);
    if (detail.empty()) detail = LastError();
    if (!detail.empty()) msg += " (" + detail + ")";
    throw CommError(msg);
  }

  // NCCL's text on its last error (of comm_, or of this thread when there is
  // no communicator yet); empty when it has none.
  std::string LastError() const {
    const char* last = ncclGetLastError(comm_);
    return last != nullptr ? std::string(last) : std::string();
  }

  void CheckUsable(const char* what) const {
    if (broken_) {
      throw CommError(std::string("nccl: ") + what + " on rank " +
                      std::to_string(rank_) +
                      " after an earlier failure aborted the communicator");
    }
  }

  // A collective call of a non-blocking communicator may return
  // ncclInProgress; anything else but success is an error.
  void Issue(const std::string& what, ncclResult_t result) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    const std::string detail = Abort();
    NcclCheck(result, what, detail);
  }

  // The watchdog: waits for the communicator and the stream for `limit`
  // (PollPacer's rhythm); aborts on a timeout, an NCCL error or a dead peer.
  void Wait(const std::string& what, std::chrono::milliseconds limit) {
    const auto start = Clock::now();
    const auto deadline = start + limit;
    bool enqueued = false;  // the collective's kernels are on the stream
    PollPacer pacer;
    for (;; pacer.Pause()) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
      if (query != ncclSuccess) async = query;
      if (async != ncclSuccess && async != ncclInProgress) {
        std::string msg = "nccl: " + what + " failed on rank " +
                          std::to_string(rank_) + ": " +
                          ncclGetErrorString(async);
        const std::string detail = Abort();
        if (!detail.empty()) msg += " (" + detail + ")";
        throw CommError(msg);
      }
      if (async == ncclSuccess) {
        if (!enqueued) {
          CudaCheck(cudaEventRecord(done_, stream_), kName, "cudaEventRecord");
          enqueued = true;
        }
        cudaError_t status = cudaEventQuery(done_);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) {
          const std::string detail = Abort();
          CudaCheck(
              status, kName,
              what + " (stream" + (detail.empty() ? "" : "; " + detail) + ")");
        }
      }
      if (!pacer.CheckDue()) continue;
      int dead = peers_.FirstDeadPeer();
      if (dead >= 0) {
        const std::string detail = Abort();
        throw CommError("nccl: rank " + std::to_string(dead) + " died during " +
                        what + " (rank " + std::to_string(rank_) +
                        " waiting); communicator aborted" +
                        (detail.empty() ? "" : " (" + detail + ")"));
      }
      if (Clock::now() > deadline) {
        const std::string detail = Abort();
        throw CommError(
            "nccl: timed out after " +
            std::to_string(std::chrono::duration<double>(limit).count()) +
            " s on rank " + std::to_string(rank_) + " waiting for " + what +
            " (a peer did not arrive or is stuck); communicator aborted" +
            (detail.empty() ? "" : " (" + detail + ")"));
      }
    }
  }

  // ncclCommAbort returns without waiting for peers; in-flight kernels are
  // stopped, so the stream and the buffers can then be released. Returns
  // NCCL's last error text, read while the communicator still exists, and
  // says so when the abort itself failed.
  std::string Abort() {
    broken_ = true;
    if (comm_ == nullptr) return LastError();
    std::string detail = LastError();
    const ncclResult_t result = ncclCommAbort(comm_);
    comm_ = nullptr;
    if (result != ncclSuccess) {
      detail += std::string(detail.empty() ? "" : "; ") +
                "ncclCommAbort failed: " + ncclGetErrorString(result);
    }
    return detail;
  }

  void Release() noexcept {
    if (comm_ != nullptr) {
      // A clean shutdown flushes outstanding work (non-blocking: poll it
      // under the deadline, abort if a peer never finishes).
      ncclResult_t result = ncclCommFinalize(comm_);
      if (result == ncclSuccess || result == ncclInProgress) {
        try {
          Wait("ncclCommFinalize", timeout_);
        } catch (...) {  // Wait() aborted the communicator
        }
      } else {
        Abort();
      }
      if (comm_ != nullptr) {
        ncclCommDestroy(comm_);
        comm_ = nullptr;
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    done_ = nullptr;
    stream_ = nullptr;
  }

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds join_timeout_;
  int device_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  float* scratch_ = nullptr;
  PeerWatch peers_;
  bool broken_ = false;
  uint64_t bytes_sent_ = 0;
};

const bool kRegistered = RegisterCommunicator(
    kName, [](const RankContext& context, const CommOptions& options) {
      return CreateNcclCommunicator(context, options);
    });

}  // namespace

std::unique_ptr<Communicator> CreateNcclCommunicator(
    const RankContext& context, const CommOptions& options) {
  (void)kRegistered;
  return std::make_unique<NcclCommunicator>(context, options);
}

}  // namespace ringlab::comm
