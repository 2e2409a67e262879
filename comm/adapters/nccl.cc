#include "comm/adapters/nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "comm/backend.h"
#include "comm/cuda_support.h"
#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"
#include "comm/poll_pacer.h"
#include "comm/store/hex.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

constexpr char kName[] = "nccl";
using Clock = std::chrono::steady_clock;

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    default:
      return ncclSum;
  }
}

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat16:
      return ncclHalf;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      break;
  }
  return ncclFloat;
}

// "8 float16 values", for the messages.
std::string Elements(size_t count, DataType type) {
  return std::to_string(count) + " " + DataTypeName(type) + " values";
}

// The most words the front's call check reduces at once.
constexpr size_t kMaxCheckWords = 16;

class NcclBackend final : public Backend {
 public:
  NcclBackend(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout),
        join_timeout_(options.join_timeout),
        peers_(context.peers, context.rank) {
    if (context.store == nullptr && world_size_ > 1) {
      throw CommError("nccl: needs a rendezvous store for the unique id");
    }
    device_ = SelectCudaDevice(options, context.local_rank, kName);
    try {
      Init(context);
    } catch (...) {
      Release();
      throw;
    }
  }

  ~NcclBackend() override { Release(); }

  void AllReduce(void* data, size_t count, DataType type,
                 ReduceOp op) override {
    if (count == 0) return;
    const std::string what = std::string("AllReduce(") + ReduceOpName(op) +
                             ") of " + Elements(count, type);
    Issue(what, ncclAllReduce(data, data, count, NcclType(type), NcclOp(op),
                              comm_, stream_));
    Wait(what, timeout_);
  }

  void Broadcast(void* data, size_t count, DataType type, int root) override {
    if (count == 0) return;
    const std::string what = "Broadcast of " + Elements(count, type) +
                             " from rank " + std::to_string(root);
    Issue(what, ncclBroadcast(data, data, count, NcclType(type), root, comm_,
                              stream_));
    Wait(what, timeout_);
  }

  void AllGather(const void* send, void* recv, size_t count,
                 DataType type) override {
    if (count == 0) return;
    // In place (send is this rank's block of recv) as NCCL itself allows.
    const std::string what =
        "AllGather of " + Elements(count, type) + " per rank";
    Issue(what,
          ncclAllGather(send, recv, count, NcclType(type), comm_, stream_));
    Wait(what, timeout_);
  }

  void ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                     ReduceOp op) override {
    if (count == 0) return;
    // In place (recv is this rank's block of send) as NCCL itself allows.
    const std::string what = std::string("ReduceScatter(") + ReduceOpName(op) +
                             ") of " + Elements(count, type) + " per rank";
    Issue(what, ncclReduceScatter(send, recv, count, NcclType(type), NcclOp(op),
                                  comm_, stream_));
    Wait(what, timeout_);
  }

  void Barrier() override {
    // An allreduce of one float: returns on a rank only once every rank has
    // entered it.
    Issue("Barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum,
                                   comm_, stream_));
    Wait("Barrier", timeout_);
  }

  // The front's call check: NCCL hangs, or mixes buffers, when ranks
  // disagree on a call. Through pinned host memory, so that every copy is
  // asynchronous and the wait keeps its deadline.
  void MaxOverRanks(int64_t* words, size_t count) override {
    if (count > kMaxCheckWords) {
      throw CommError("nccl: a call check of " + std::to_string(count) +
                      " words");
    }
    const size_t bytes = count * sizeof(int64_t);
    std::memcpy(check_host_, words, bytes);
    CudaCheck(cudaMemcpyAsync(check_device_, check_host_, bytes,
                              cudaMemcpyHostToDevice, stream_),
              kName, "cudaMemcpyAsync (call check)");
    Issue("a call check", ncclAllReduce(check_device_, check_device_, count,
                                        ncclInt64, ncclMax, comm_, stream_));
    CudaCheck(cudaMemcpyAsync(check_host_, check_device_, bytes,
                              cudaMemcpyDeviceToHost, stream_),
              kName, "cudaMemcpyAsync (call check)");
    Wait("a call check", timeout_);
    std::memcpy(words, check_host_, bytes);
  }

 private:
  void Init(const RankContext& context) {
    CudaCheck(cudaStreamCreate(&stream_), kName, "cudaStreamCreate");
    CudaCheck(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), kName,
              "cudaEventCreate");
    CudaCheck(cudaMalloc(&scratch_, sizeof(float)), kName, "cudaMalloc");
    CudaCheck(cudaMalloc(&check_device_, kMaxCheckWords * sizeof(int64_t)),
              kName, "cudaMalloc (call check)");
    CudaCheck(cudaHostAlloc(&check_host_, kMaxCheckWords * sizeof(int64_t),
                            cudaHostAllocDefault),
              kName, "cudaHostAlloc (call check)");

    // NCCL's bootstrap and socket transport listen on an interface of
    // NCCL's choosing: the job's ("=" asks for that exact name), unless the
    // user chose. Before NCCL reads it, at its first call.
    if (static_cast<int>(context.peers.size()) > rank_) {
      KeepDataSocketsOnJobInterface(context.peers[rank_].address,
                                    launch::kNcclSocketIfname, "=");
    }
    ncclUniqueId id;
    if (world_size_ > 1) {
      CheckDistinctDevices(context);
      if (rank_ == 0) {
        NcclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
        context.store->Set("unique_id", ToHex(&id, sizeof(id)));
      } else {
        std::string hex = context.store->Get("unique_id", join_timeout_);
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
  // device is its host (the rank's PeerInfo) plus its PCI bus id: GPUs of
  // different hosts may share a bus id.
  void CheckDistinctDevices(const RankContext& context) {
    char bus_id[64] = {};
    CudaCheck(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device_), kName,
              "cudaDeviceGetPCIBusId");
    const std::string ours = context.peers[rank_].host + " " + bus_id;
    Store* const store = context.store;
    store->Set("bus/" + std::to_string(rank_), ours);
    store->Wait(RankKeys("bus", world_size_), join_timeout_);
    for (int r = 0; r < world_size_; ++r) {
      if (r == rank_) continue;
      std::string other =
          store->Get("bus/" + std::to_string(r), std::chrono::milliseconds(0));
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
            "nccl: timed out after " + SecondsText(limit) + " on rank " +
            std::to_string(rank_) + " waiting for " + what +
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
    if (check_device_ != nullptr) cudaFree(check_device_);
    if (check_host_ != nullptr) cudaFreeHost(check_host_);
    check_device_ = nullptr;
    check_host_ = nullptr;
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
  int64_t* check_device_ = nullptr;
  int64_t* check_host_ = nullptr;
  const PeerWatch peers_;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = kName;
  d.summary = "NVIDIA's NCCL, one GPU per rank, on the rank's own stream";
  d.memory = MemoryKind::kDevice;
  d.spans_hosts = true;
  d.one_device_per_rank = true;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  // ncclHalf and ncclBfloat16: NCCL's kernels round after every partial
  // sum of their ring or tree (never run here: no GPU has run this code).
  d.types = AllDataTypes();
  d.checks_calls = false;   // NCCL hangs or mixes buffers on a mismatch
  d.reduce_scatter = true;  // ncclReduceScatter
  d.conformance.avg_premultiplies = true;
  d.create = FactoryOf<NcclBackend>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
