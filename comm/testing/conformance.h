// The communicator conformance suite: one set of checks that every backend
// (shm_ring, mpi, nccl, ipc_ring, and any added later) must pass, as ggml's
// test-backend-ops holds every backend to one suite. A case is a body that
// runs on every rank of a job and throws on failure; drivers run the cases in
// forked processes (RunRanks), in threads of one process for backends whose
// ranks are threads (RunThreadRanks: ipc_ring_threads, host_threads), both in
// conformance_test.cc over every registered backend, with gloo's and hier's
// ranks on real emulated hosts (RunRanksOnHosts, conformance_hosts_test.cc),
// or under mpirun, on one host or on emulated ones (conformance_mpi_main.cc).
// Inputs are nccl-tests' exact-sum integers, so results are checked to 0 ulp.
#ifndef RINGLAB_COMM_TESTING_CONFORMANCE_H_
#define RINGLAB_COMM_TESTING_CONFORMANCE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/testing/multi_process.h"

namespace ringlab::comm::testing {

// A caller's buffer in the memory a backend works on (host or device).
class RankBuffer {
 public:
  virtual ~RankBuffer() = default;
  virtual float* data() = 0;
  virtual std::vector<float> Download() const = 0;
};
using BufferMaker =
    std::function<std::unique_ptr<RankBuffer>(const std::vector<float>&)>;

// Device buffers are registered by //comm/testing:device_buffers when it is
// linked, with the number of CUDA devices (asked of a forked child, so that
// the caller never initialises CUDA; *why says why there are none).
bool RegisterDeviceBuffers(BufferMaker maker,
                           std::function<int(std::string* why)> devices);
std::unique_ptr<RankBuffer> MakeBuffer(MemoryKind kind,
                                       const std::vector<float>& host);
// -1 when no device-buffer support is linked.
int CudaDevices(std::string* why);

// What the suite must know of a backend, as its description says it
// (comm/backend.h): the drivers choose world sizes and faults by it, the
// cases their expectations.
struct BackendTraits {
  bool needs_gpu = false;         // skipped, saying so, where no GPU exists
  bool one_gpu_per_rank = false;  // nccl: world size at most the GPU count
  bool needs_mpirun = false;      // mpi: ranks are mpirun's processes
  // BackendDescription::Conformance: ncclAvg's rounding, whether survivors
  // of a death fail by themselves, how many deadlines noticing it may take.
  bool avg_premultiplies = false;
  bool survives_peer_death = true;
  int join_deadlines_to_notice_death = 1;
  int op_deadlines_to_notice_death = 0;
  // Communicator::Allocate hands out memory (the device backends do not yet).
  bool allocates = true;
  // Communicator::ReduceScatter works: the backend's own, or the front's
  // (host memory only).
  bool reduce_scatter = true;
  // Ranks are threads of one process (RunThreadRanks): a killed rank is a
  // killed job, so the faults are a rank that leaves instead.
  bool ranks_are_threads = false;
  // BackendDescription::Conformance::suite_hosts.
  int suite_hosts = 1;
  // BackendDescription::types.
  std::vector<DataType> types = {DataType::kFloat32};
};
// The traits of a registered backend (std::invalid_argument for another).
BackendTraits TraitsOf(const std::string& backend);

// The largest world size to run with one process per rank: 4, or
// RINGLAB_TEST_MAX_PROCESS_RANKS when set (on one GPU every wait of ranks
// that are processes costs a time slice, so a check with little time runs
// 2). Ranks as threads are not capped.
int MaxProcessRanks();

// One check, run by every rank of a job of world size >= min_world.
struct ConformanceCase {
  std::string name;
  int min_world = 1;
  std::function<void(Communicator& comm, const BackendTraits& traits)> run;
  // A mismatch case prints its CommError as "[mismatch] <message>"; some
  // rank's message must contain both of these (e.g. "count=8", "count=9").
  std::vector<std::string> must_name;
  // Skipped, saying so, for backends whose traits say they do not allocate.
  bool needs_allocate = false;
  // Skipped, saying so, for backends whose traits say ReduceScatter does not
  // work (device memory without one of the backend's own).
  bool needs_reduce_scatter = false;
  // Skipped, saying so, for backends whose description lacks this type.
  DataType needs_type = DataType::kFloat32;
};

// Why a driver skips case c on a backend of these traits ("" to run it).
std::string SkipReason(const ConformanceCase& c, const BackendTraits& traits);

// Exact sums (sum and avg, counts 0, 1, N-1, primes, large), max and min
// where the backend has them, unaligned buffers, bitwise equality across
// ranks, broadcast from every root, bus bytes, argument errors, ops and
// element types the backend does not have refused as CommErrors; and
// AllGatherCases.
std::vector<ConformanceCase> CollectiveCases();
// AllGather (conformance_allgather.cc): every rank's block in its place, bit
// for bit, out of place and in place (counts 0, 1, N-1, primes, 4 Mi),
// unaligned buffers with guards, bus bytes, argument errors, allgathers
// between the other collectives.
std::vector<ConformanceCase> AllGatherCases();
// ReduceScatter (conformance_reduce_scatter.cc): for every type and op the
// backend lists, each rank's block as AllReduce leaves it, bit for bit, out
// of place and in place (counts 0 to 256 Ki), bus bytes, argument errors.
std::vector<ConformanceCase> ReduceScatterCases();
// Ranks that disagree on a reduce-scatter's count.
std::vector<ConformanceCase> ReduceScatterMismatchCases();
// The 16-bit element types (conformance_types.cc), for every type the
// backend lists: exact sums and averages, unaligned buffers, bitwise equality
// across ranks, broadcast and allgather of any bits, bus bytes.
std::vector<ConformanceCase> DataTypeCases();
// Ranks that disagree on count, op or root, on every path (inline, one-shot,
// ring sized): every rank's call throws a CommError saying "mismatched";
// and AllGatherMismatchCases, DataTypeMismatchCases and
// AnnouncedMismatchCases.
std::vector<ConformanceCase> MismatchCases();
// Rank 1 reduces the same bytes as float16 where the others reduce float32,
// on every path.
std::vector<ConformanceCase> DataTypeMismatchCases();
// Ranks that disagree on an allgather's count, at three sizes.
std::vector<ConformanceCase> AllGatherMismatchCases();
// Announced calls (conformance_announced.cc, Communicator::Announce): calls
// announced several ahead of running them, of every kind, exact; a call
// made otherwise than announced fails saying so (or runs, where announcing
// does nothing).
std::vector<ConformanceCase> AnnouncedCases();
// Ranks that announce, and make, allreduces of different counts.
std::vector<ConformanceCase> AnnouncedMismatchCases();

// For the mismatch cases: runs `call`, which the ranks disagree on, and
// throws unless it failed on this rank with a CommError saying
// "mismatched" (printed with RankPrint).
void ExpectMismatchError(Communicator& comm, const std::function<void()>& call);
// A case named `name` where rank 1 calls with count + 1 elements and the
// others with count: `call(comm, its count)` must fail with ExpectMismatchError
// on every rank, and some rank's error name both counts.
ConformanceCase CountMismatchCase(
    const std::string& name, size_t count,
    std::function<void(Communicator& comm, size_t mine)> call);
// Both lists.
std::vector<ConformanceCase> AllCases();

// "" when some rank's output names every string of c.must_name (or it names
// none); else which are missing, with every rank's output. Every driver
// checks a mismatch case's job with it.
std::string MustNameMissing(const ConformanceCase& c,
                            const std::vector<RankResult>& results);

// A rank's communicator for a driver's job: CreateCommunicator with these
// deadlines, throwing unless its rank and world size are the context's.
std::unique_ptr<Communicator> MakeRankCommunicator(
    const std::string& backend, const RankContext& c,
    std::chrono::milliseconds timeout, std::chrono::milliseconds join_timeout);

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_CONFORMANCE_H_
