// The collective-communication interface every backend implements (shm_ring,
// mpi, nccl, ipc_ring), and the one factory that creates them by name. One
// Communicator per rank; data lives in host or device memory as memory() says.
// comm knows nothing of neural networks: it moves and reduces float buffers.
#ifndef RINGLAB_COMM_COMMUNICATOR_H_
#define RINGLAB_COMM_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/tuning.h"

namespace ringlab::comm {

class Store;

enum class ReduceOp { kSum, kAvg };
enum class MemoryKind { kHost, kDevice };

const char* ReduceOpName(ReduceOp op);

// Every failure of a collective (a peer that died or timed out, calls that
// disagree across ranks, a system call that failed) is reported as a CommError
// whose message names what was waited for, e.g.
// "shm_ring: rank 1 exited during AllReduce (step 2 of reduce-scatter)".
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const char* backend() const = 0;  // "shm_ring", "mpi", …
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where the pointers given to the collectives must point.
  virtual MemoryKind memory() const = 0;

  // In place; count may be 0. Every rank must call with the same count and op.
  virtual void AllReduce(float* data, size_t count, ReduceOp op) = 0;
  virtual void Broadcast(float* data, size_t count, int root) = 0;
  virtual void Barrier() = 0;
  // NCCL's allgather: every rank contributes count floats from send, and
  // recv (world_size() * count floats) receives rank r's at r * count on
  // every rank. send may be recv + rank() * count (in place); otherwise the
  // two must not overlap. count may be 0; every rank must call with the same
  // count.
  virtual void AllGather(const float* send, float* recv, size_t count) = 0;

  // Bus bytes of every collective this rank completed since creation, as
  // nccl-tests counts them (AllReduceBusBytes, BroadcastBusBytes,
  // AllGatherBusBytes): what each rank moves in a bandwidth-optimal
  // algorithm, whatever algorithm the backend chose, so reports compare
  // across backends.
  virtual uint64_t bytes_sent() const = 0;

  // Memory for count floats that the peers can reach directly (the idea of
  // NCCL's user-buffer registration and PyTorch's symmetric memory): a
  // collective on a range inside it copies nothing in or out. Collective:
  // every rank calls it with the same count, in the same order. Zeroed,
  // valid until the communicator is destroyed. Backends without such memory
  // hand out ordinary host memory (device backends: a CommError).
  virtual float* Allocate(size_t count);

 private:
  std::vector<std::unique_ptr<float[]>> allocations_;
};

// nccl-tests' bus bytes: 2(N-1)/N of the buffer for an allreduce, the whole
// buffer for a broadcast, (N-1)/N of the gathered buffer (N * count floats)
// for an allgather; nothing moves at world size 1.
inline uint64_t AllReduceBusBytes(size_t count, int world_size) {
  if (world_size <= 1) return 0;
  const uint64_t n = static_cast<uint64_t>(world_size);
  return 2 * (n - 1) * (count * sizeof(float)) / n;
}
inline uint64_t BroadcastBusBytes(size_t count, int world_size) {
  return world_size > 1 ? count * sizeof(float) : 0;
}
inline uint64_t AllGatherBusBytes(size_t count, int world_size) {
  if (world_size <= 1) return 0;
  return static_cast<uint64_t>(world_size - 1) * (count * sizeof(float));
}

struct CommOptions {
  // Every wait of a collective ends by this deadline with a CommError.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Creation, where ranks find and map each other, has its own deadline: a
  // short one for collectives must not also bound a slow start.
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  // CUDA device for GPU backends (usually LOCAL_RANK); -1: LOCAL_RANK mod the
  // device count.
  int cuda_device = -1;
  int local_rank = 0;
  // The local address gloo's TCP pairs listen on (peers must reach it).
  std::string gloo_address = "127.0.0.1";
  // Backends' thresholds and buffer sizes (comm/tuning.h), validated by
  // CreateCommunicator; binaries fill them from RINGLAB_* variables with
  // comm/tuning_env.h.
  BackendTuning tuning;
};

// Everything a backend needs to find its peers.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  Store* store =
      nullptr;  // may be null for backends that bring their own (mpi)
  // The job's secret (raw bytes, at least 16; see comm/store/job_secret.h):
  // what the store demanded of every rank's connection, known only to the job's
  // processes. A backend that must recognise something of its own job
  // through a channel strangers could write (a segment name in the store, a
  // file in /dev/shm) tags it with JobTag(job_secret, purpose), which nobody
  // without the secret can forge. Empty only where there is no store
  // (mpirun without MASTER_PORT).
  std::string job_secret;
  // Each rank's host, indexed by rank (rendezvous.h: ThisHostIdentity), as
  // every rank reported it through the store; empty where there is no store.
  std::vector<std::string> hosts;
};

// "rank 0 on a; ranks 1,2 on b" for each rank's host; *count (when not null)
// says how many hosts.
std::string DescribeHosts(const std::vector<std::string>& hosts, size_t* count);

// For backends whose ranks share memory and so must all run on one host
// (shm_ring, ipc_ring): throws std::invalid_argument naming the hosts and
// their ranks when context.hosts holds more than one, suggesting a backend
// that spans hosts. Does nothing when the hosts are unknown.
void RequireOneHost(const RankContext& context, const std::string& backend);

using CommunicatorFactory = std::function<std::unique_ptr<Communicator>(
    const RankContext& context, const CommOptions& options)>;

// Backends register themselves at static-initialisation time; the GPU ones only
// when they are linked into the binary.
bool RegisterCommunicator(const std::string& name, CommunicatorFactory factory);
std::vector<std::string> RegisteredCommunicators();

// Throws std::invalid_argument for an unknown name (listing the known ones)
// or tuning outside its ranges (ValidateTuning, before the backend starts:
// nothing is joined), and CommError when the backend cannot start.
std::unique_ptr<Communicator> CreateCommunicator(const std::string& name,
                                                 const RankContext& context,
                                                 const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_COMMUNICATOR_H_
