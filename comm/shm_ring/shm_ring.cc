#include "comm/shm_ring/shm_ring.h"

#include <memory>
#include <string>
#include <vector>

#include "comm/shm_ring/internal.h"

namespace ringlab::comm {
namespace shm {

void* ShmRing::AllocateRegistered(size_t bytes) {
  return regions_->Allocate((bytes + sizeof(float) - 1) / sizeof(float));
}

void ShmRing::AllReduce(void* buffer, size_t count, DataType type,
                        ReduceOp op) {
  const Kernels& k = dtype::KernelsFor(type);
  char* const data = static_cast<char*>(buffer);
  const size_t bytes = count * k.size;
  // Up to 1 KiB the inline and one-shot paths, one hand-off, beat the
  // registered one's two (0.43-0.83 us against 0.78-0.88 at 2 ranks).
  const bool registered = bytes > kRegisteredMinBytes && regions_ &&
                          regions_->Find(data, bytes, &peer_slots_);
  Call call = Begin(CallKind::kAllReduce, count, op, 0, registered, type);
  if (world_ == 1) return;  // the sum (and average) of one rank is itself
  Guarded(call, [&] {
    if (registered) {
      RegisteredAllReduce(call, peer_slots_, count, op, k);
      return;
    }
    // oneshot_bytes = 0 sends everything but count 0 through the
    // ring (the tests use it to cover the ring with tiny counts).
    if (count == 0 || (bytes <= kInlineBytes && bytes <= oneshot_)) {
      InlineAllReduce(call, data, count, op, k);
    } else if (bytes <= oneshot_) {
      OneShotAllReduce(call, data, count, op, k);
    } else if (bytes <= ring_) {
      StagedAllReduce(call, data, count, op, k);
    } else {
      RingAllReduce(call, data, count, op, k);
    }
  });
}

}  // namespace shm

namespace {

BackendDescription Description() {
  BackendDescription d;
  d.name = "shm_ring";
  d.summary =
      "ringlab's ring allreduce over POSIX shared memory, between the "
      "processes of one host";
  d.memory = MemoryKind::kHost;
  d.launch = RankLaunch::kProcesses;
  d.spans_hosts = false;
  d.checks_calls = true;
  d.registers_memory = true;
  // Rounded as comm/dtype's kernels say: in the ring after every hop, in
  // the one-shot, staged and registered paths once, after a float32 sum in
  // rank order.
  d.types = AllDataTypes();
  d.tuning = ShmRingSettings();
  d.create = FactoryOf<shm::ShmRing>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
