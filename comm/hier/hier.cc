#include "comm/hier/hier.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/dtype/kernels.h"

namespace ringlab::comm::hier {
namespace {

std::unique_ptr<Communicator> CreatePart(const std::string& name,
                                         const RankContext& job,
                                         const std::vector<int>& members,
                                         const CommOptions& options,
                                         const char* role) {
  const BackendDescription& d = BackendNamed(name);
  if (d.memory != MemoryKind::kHost) {
    throw std::invalid_argument(
        "hier: its " + std::string(role) + " backend " + name +
        " reduces GPU memory; hier reduces host memory");
  }
  return CreateGroupCommunicator(name, job, members, options);
}

}  // namespace

HierBackend::HierBackend(const RankContext& context, const CommOptions& options)
    : topology_(TopologyOf(context.peers, context.rank)),
      world_size_(context.world_size) {
  // Every rank makes its host's part, then its cross-host group's: no group
  // waits for a rank still joining another.
  intra_ = CreatePart(options.intra_host, context, topology_.HostGroup(),
                      options, "intra-host");
  inter_ = CreatePart(options.inter_host, context, topology_.CrossGroup(),
                      options, "inter-host");
}

HierBackend::~HierBackend() = default;

void HierBackend::AllReduce(void* data, size_t count, DataType type,
                            ReduceOp op) {
  const int g = topology_.ranks_per_host;
  const ReduceOp sum = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  char* bytes = static_cast<char*>(data);
  const size_t size = DataTypeSize(type);
  // 1. The host's sum, on every rank of it.
  intra_->AllReduce(data, count, type, sum);
  // 2. This rank's shard across hosts (the last shards may be short or
  //    empty; every rank of a cross-host group has the same one).
  const size_t chunk = (count + g - 1) / g;
  const size_t begin = std::min(count, topology_.local * chunk);
  const size_t length = std::min(chunk, count - begin);
  inter_->AllReduce(bytes + begin * size, length, type, sum);
  // 3. The shards, gathered on every rank of the host.
  if (g > 1) {
    scratch_.resize(chunk * g * size);
    std::memcpy(scratch_.data() + topology_.local * chunk * size,
                bytes + begin * size, length * size);
    intra_->AllGather(scratch_.data() + topology_.local * chunk * size,
                      scratch_.data(), chunk, type);
    std::memcpy(bytes, scratch_.data(), count * size);
  }
  // The sum, divided once (rounded once more for the 16-bit types).
  if (op == ReduceOp::kAvg) {
    dtype::KernelsFor(type).scale(data, static_cast<float>(world_size_), count);
  }
}

void HierBackend::Broadcast(void* data, size_t count, DataType type, int root) {
  int root_host = 0, root_local = 0;
  for (int h = 0; h < topology_.hosts; ++h) {
    for (int l = 0; l < topology_.ranks_per_host; ++l) {
      if (topology_.rank_at[h][l] == root) root_host = h, root_local = l;
    }
  }
  if (topology_.local == root_local) {
    inter_->Broadcast(data, count, type, root_host);
  }
  intra_->Broadcast(data, count, type, root_local);
}

void HierBackend::AllGather(const void* send, void* recv, size_t count,
                            DataType type) {
  const int g = topology_.ranks_per_host;
  const size_t block = count * DataTypeSize(type);
  // The host's blocks, then every host's, host by host; `send` is read
  // before `recv` is written (it may lie inside it).
  scratch_.resize(g * block);
  intra_->AllGather(send, scratch_.data(), count, type);
  gathered_.resize(topology_.hosts * g * block);
  inter_->AllGather(scratch_.data(), gathered_.data(), g * count, type);
  char* out = static_cast<char*>(recv);
  for (int h = 0; h < topology_.hosts; ++h) {
    for (int l = 0; l < g; ++l) {
      std::memcpy(out + topology_.rank_at[h][l] * block,
                  gathered_.data() + (h * g + l) * block, block);
    }
  }
}

void HierBackend::Barrier() {
  intra_->Barrier();
  inter_->Barrier();
  intra_->Barrier();
}

bool HierBackend::MovesDataOnlyInsideCalls() const {
  return intra_->MovesDataOnlyInsideCalls() ||
         inter_->MovesDataOnlyInsideCalls();
}

void HierBackend::Progress() {
  intra_->Progress();
  inter_->Progress();
}

void* HierBackend::AllocateRegistered(size_t bytes) {
  return intra_->Allocate((bytes + sizeof(float) - 1) / sizeof(float));
}

// The maximum over the host (its ranks' words gathered), then over the
// hosts: every cross-host group holds one rank of every host, so each ends
// with every rank's maximum. Gathers copy bits, so int64 words travel as
// pairs of floats unchanged.
void HierBackend::MaxOverRanks(int64_t* words, size_t count) {
  const auto gather_max = [&](Communicator& group) {
    std::vector<int64_t> all(count * group.world_size());
    group.AllGather(reinterpret_cast<const float*>(words),
                    reinterpret_cast<float*>(all.data()), 2 * count);
    for (int r = 0; r < group.world_size(); ++r) {
      for (size_t i = 0; i < count; ++i) {
        words[i] = std::max(words[i], all[r * count + i]);
      }
    }
  };
  gather_max(*intra_);
  gather_max(*inter_);
}

namespace {

BackendDescription Description() {
  BackendDescription d;
  d.name = "hier";
  d.summary =
      "hierarchical: a backend inside each host (shm_ring) and one across "
      "hosts (gloo), each host's link carrying 2(H-1)/H of the buffer";
  d.memory = MemoryKind::kHost;
  d.launch = RankLaunch::kProcesses;
  d.spans_hosts = true;
  d.checks_calls = false;
  d.registers_memory = true;
  // Those of its parts (a part without the type refuses the call): a
  // 16-bit sum is rounded by the host's part, then by the cross-host one.
  d.types = AllDataTypes();
  d.conformance.suite_hosts = 2;
  d.create = FactoryOf<HierBackend>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm::hier
