#include "comm/communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "comm/call_agreement.h"
#include "comm/call_mesh.h"
#include "comm/store/prefix_store.h"
#include "comm/store/store.h"

namespace ringlab::comm {
namespace {

std::string Names(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "" : ", ") + n;
  return text.empty() ? "none" : text;
}

template <typename T, typename Name>
std::string SupportedList(const std::vector<T>& items, Name name) {
  std::vector<std::string> names;
  for (const T& item : items) names.push_back(name(item));
  return Names(names);
}

}  // namespace

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

uint64_t AllReduceBusBytes(uint64_t bytes, int world_size) {
  if (world_size <= 1) return 0;
  const uint64_t n = static_cast<uint64_t>(world_size);
  return 2 * (n - 1) * bytes / n;
}

uint64_t BroadcastBusBytes(uint64_t bytes, int world_size) {
  return world_size > 1 ? bytes : 0;
}

uint64_t ReduceScatterBusBytes(uint64_t bytes, int world_size) {
  return AllGatherBusBytes(bytes, world_size);
}

uint64_t AllGatherBusBytes(uint64_t bytes, int world_size) {
  if (world_size <= 1) return 0;
  return static_cast<uint64_t>(world_size - 1) * bytes;
}

Communicator::Communicator(std::unique_ptr<Backend> backend,
                           const BackendDescription& description, int rank,
                           int world_size, const BackendTuning& tuning)
    : backend_(std::move(backend)),
      description_(description),
      rank_(rank),
      world_size_(world_size) {
  if (!backend_ || world_size < 1 || rank < 0 || rank >= world_size) {
    throw std::invalid_argument("Communicator: rank " + std::to_string(rank) +
                                " not in [0, world_size=" +
                                std::to_string(world_size) + ") or no backend");
  }
  if (description_.checks_calls || world_size_ == 1) return;
  // Every rank checks when any rank asks it to: they must all make the same
  // number of calls of the backend.
  int64_t check = tuning.GetOr(CheckCallsSetting()) != 0 ? 1 : 0;
  Guard([&] { backend_->MaxOverRanks(&check, 1); });
  agree_ = check != 0;
}

Communicator::~Communicator() = default;

const char* Communicator::backend() const { return description_.name.c_str(); }

MemoryKind Communicator::memory() const { return description_.memory; }

const std::string& Communicator::Name() const { return description_.name; }

void Communicator::CheckUsable(const char* what) const {
  if (broken_.empty()) return;
  throw CommError(
      Name() + ": " + what +
      " on a communicator unusable after an earlier error: " + broken_);
}

void Communicator::CheckBuffer(DataType type, const void* data, size_t count,
                               const char* what) const {
  if (!description_.Supports(type)) {
    throw CommError(Name() + ": " + what + " of " + DataTypeName(type) +
                    " is not supported (it has " +
                    SupportedList(description_.types, DataTypeName) + ")");
  }
  const size_t size = DataTypeSize(type);
  if (count > SIZE_MAX / size / static_cast<size_t>(world_size_)) {
    throw std::invalid_argument(Name() + ": " + what + " of " +
                                std::to_string(count) + " elements from " +
                                std::to_string(world_size_) +
                                " ranks does not fit in memory");
  }
  if (data == nullptr && count > 0) {
    throw std::invalid_argument(Name() + ": " + what + " of null data");
  }
  if (reinterpret_cast<uintptr_t>(data) % size != 0) {
    throw std::invalid_argument(
        Name() + ": " + what + "'s " + DataTypeName(type) +
        " buffer is not aligned to " + std::to_string(size) + " bytes");
  }
}

template <typename Fn>
void Communicator::Guard(Fn fn) {
  try {
    fn();
  } catch (const CommError& e) {
    broken_ = e.what();
    throw;
  } catch (const StoreError& e) {
    broken_ = Name() + ": " + e.what();
    throw CommError(broken_);
  }
}

std::string Communicator::Agree(CallDescription& call, int64_t* words) {
  if (!mesh_) {
    call.seq = ++calls_;
    EncodeForAgreement(call, words);
    backend_->MaxOverRanks(words, kAgreementWords);
    return "";
  }
  Announcement announced;
  {
    std::lock_guard<std::mutex> lock(agreement_);
    call.seq = ++calls_;
    EncodeForAgreement(call, words);
    if (call.seq > announced_) {
      mesh_->Post(words, call.ToString());
    } else {
      announced = std::move(announcements_.front());
      announcements_.pop_front();
    }
  }
  if (!announced.failure.empty()) throw CommError(announced.failure);
  std::function<void()> progress;
  if (backend_->MovesDataOnlyInsideCalls()) {
    progress = [this] { backend_->Progress(); };
  }
  if (announced.words.empty() ||
      std::equal(words, words + kAgreementWords, announced.words.begin())) {
    mesh_->Collect(words, call.ToString(), progress);
    return "";
  }
  // The peers read what was announced: so are theirs read here, to keep
  // the ranks in step.
  mesh_->Collect(announced.words.data(), call.ToString(), progress);
  return Name() + ": rank " + std::to_string(rank_) + " is in " +
         call.ToString() + ", which it announced otherwise";
}

void Communicator::Announce(CallKind kind, size_t count, DataType type,
                            ReduceOp op, int root) {
  if (!mesh_) return;
  std::lock_guard<std::mutex> lock(agreement_);
  const CallDescription call{
      std::max(announced_, calls_) + 1, kind, count, type, op, root};
  Announcement announcement;
  announcement.words.resize(kAgreementWords);
  EncodeForAgreement(call, announcement.words.data());
  try {
    mesh_->Post(announcement.words.data(), call.ToString());
  } catch (const CommError& e) {
    announcement.failure = e.what();  // the call reports it, on its thread
  }
  announced_ = call.seq;
  announcements_.push_back(std::move(announcement));
}

bool Communicator::MovesDataOnlyInsideCalls() const {
  return backend_->MovesDataOnlyInsideCalls();
}

void Communicator::Progress() { backend_->Progress(); }

template <typename Move>
void Communicator::Run(CallKind kind, size_t count, DataType type, ReduceOp op,
                       int root, uint64_t bus_bytes, Move move) {
  CallDescription call{0, kind, count, type, op, root};
  if (agree_) {
    int64_t words[kAgreementWords];
    std::string otherwise;
    Guard([&] { otherwise = Agree(call, words); });
    // A mismatch leaves the ranks in step: nothing moved, all refuse alike.
    if (!otherwise.empty()) throw CommError(otherwise);
    ThrowUnlessAgreed(Name(), rank_, call, words);
    if (count == 0 && kind != CallKind::kBarrier) return;
  }
  Guard(move);
  bytes_sent_ += bus_bytes;
}

void Communicator::AllReduce(void* data, size_t count, DataType type,
                             ReduceOp op) {
  CheckUsable("AllReduce");
  if (!description_.Supports(op)) {
    throw CommError(Name() + ": AllReduce with op " + ReduceOpName(op) +
                    " is not supported (it has " +
                    SupportedList(description_.ops, ReduceOpName) + ")");
  }
  CheckBuffer(type, data, count, "AllReduce");
  if (world_size_ == 1) return;  // the sum, mean, max and min of one: itself
  Run(CallKind::kAllReduce, count, type, op, 0,
      AllReduceBusBytes(count * DataTypeSize(type), world_size_),
      [&] { backend_->AllReduce(data, count, type, op); });
}

void Communicator::Broadcast(void* data, size_t count, DataType type,
                             int root) {
  CheckUsable("Broadcast");
  if (root < 0 || root >= world_size_) {
    throw std::invalid_argument(Name() + ": Broadcast root " +
                                std::to_string(root) + " not in [0, " +
                                std::to_string(world_size_) + ")");
  }
  CheckBuffer(type, data, count, "Broadcast");
  if (world_size_ == 1) return;
  Run(CallKind::kBroadcast, count, type, ReduceOp::kSum, root,
      BroadcastBusBytes(count * DataTypeSize(type), world_size_),
      [&] { backend_->Broadcast(data, count, type, root); });
}

void Communicator::AllGather(const void* send, void* recv, size_t count,
                             DataType type) {
  CheckUsable("AllGather");
  CheckBlocks(send, recv, count, type, /*send_is_block=*/true, "AllGather");
  const size_t bytes = count * DataTypeSize(type);
  const char* own = static_cast<const char*>(recv) + rank_ * bytes;
  if (world_size_ == 1 && (send == own || bytes == 0)) return;
  if (world_size_ == 1 && description_.memory == MemoryKind::kHost) {
    std::memcpy(recv, send, bytes);
    return;
  }
  Run(CallKind::kAllGather, count, type, ReduceOp::kSum, 0,
      AllGatherBusBytes(bytes, world_size_),
      [&] { backend_->AllGather(send, recv, count, type); });
}

void Communicator::ReduceScatter(const void* send, void* recv, size_t count,
                                 DataType type, ReduceOp op) {
  CheckUsable("ReduceScatter");
  if (!description_.Supports(op)) {
    throw CommError(Name() + ": ReduceScatter with op " + ReduceOpName(op) +
                    " is not supported (it has " +
                    SupportedList(description_.ops, ReduceOpName) + ")");
  }
  CheckBlocks(recv, send, count, type, /*send_is_block=*/false,
              "ReduceScatter");
  const size_t bytes = count * DataTypeSize(type);
  const char* own = static_cast<const char*>(send) + rank_ * bytes;
  if (world_size_ == 1 && (recv == own || bytes == 0)) return;
  if (world_size_ == 1 && description_.memory == MemoryKind::kHost) {
    std::memcpy(recv, send, bytes);  // the reduction of one block: itself
    return;
  }
  if (description_.reduce_scatter) {
    Run(CallKind::kReduceScatter, count, type, op, 0,
        ReduceScatterBusBytes(bytes, world_size_),
        [&] { backend_->ReduceScatter(send, recv, count, type, op); });
    return;
  }
  if (description_.memory != MemoryKind::kHost) {
    throw CommError(Name() +
                    ": ReduceScatter is not supported on device "
                    "memory without a reduce-scatter of the backend's own");
  }
  // Through AllReduce on a copy (BackendDescription::reduce_scatter).
  std::vector<char> all(static_cast<const char*>(send),
                        static_cast<const char*>(send) + bytes * world_size_);
  AllReduce(all.data(), count * world_size_, type, op);
  std::memcpy(recv, all.data() + bytes * rank_, bytes);
}

void Communicator::CheckBlocks(const void* block, const void* blocks,
                               size_t count, DataType type, bool send_is_block,
                               const char* what) const {
  const size_t world = static_cast<size_t>(world_size_);
  if (count > SIZE_MAX / world) {
    throw std::invalid_argument(Name() + ": " + what + " of " +
                                std::to_string(world) + " blocks of " +
                                std::to_string(count) + " elements");
  }
  CheckBuffer(type, block, count, what);
  CheckBuffer(type, blocks, count * world, what);
  const size_t bytes = count * DataTypeSize(type);
  // std::less gives a total order even on pointers into different objects;
  // only addresses are compared, so this serves device pointers too.
  const auto* one = static_cast<const char*>(block);
  const auto* all = static_cast<const char*>(blocks);
  const char* own = all + static_cast<size_t>(rank_) * bytes;
  const std::less<const char*> before;
  if (bytes > 0 && before(one, all + world * bytes) &&
      before(all, one + bytes) && one != own) {
    throw std::invalid_argument(
        Name() + ": " + what + "'s " + (send_is_block ? "send" : "recv") +
        " buffer overlaps " + (send_is_block ? "recv" : "send") +
        " other than as this rank's block (" +
        (send_is_block ? "recv" : "send") + " + rank * count)");
  }
}

void Communicator::Barrier() {
  CheckUsable("Barrier");
  if (world_size_ == 1) return;
  Run(CallKind::kBarrier, 0, DataType::kFloat32, ReduceOp::kSum, 0, 0,
      [&] { backend_->Barrier(); });
}

float* Communicator::Allocate(size_t count) {
  CheckUsable("Allocate");
  if (count > SIZE_MAX / sizeof(float)) {
    throw std::invalid_argument(Name() + ": Allocate of " +
                                std::to_string(count) + " floats");
  }
  if (description_.registers_memory) {
    void* memory = nullptr;
    Guard([&] {
      memory = backend_->AllocateRegistered(std::max<size_t>(count, 1) *
                                            sizeof(float));
    });
    return static_cast<float*>(memory);
  }
  if (description_.memory != MemoryKind::kHost) {
    throw CommError(Name() + ": Allocate is not supported for device memory");
  }
  allocations_.push_back(std::make_unique<float[]>(std::max<size_t>(count, 1)));
  return allocations_.back().get();
}

namespace {

// The checks a context must pass before a backend sees it.
void CheckContext(const BackendDescription& d, const RankContext& context) {
  if (context.world_size < 1 || context.rank < 0 ||
      context.rank >= context.world_size) {
    throw std::invalid_argument(
        "CreateCommunicator: rank " + std::to_string(context.rank) +
        " not in [0, world_size=" + std::to_string(context.world_size) + ")");
  }
  if (!d.needs_store) return;
  if (context.store == nullptr) {
    throw std::invalid_argument(
        d.name + " needs a rendezvous store (set MASTER_ADDR and MASTER_PORT)");
  }
  if (context.peers.size() != static_cast<size_t>(context.world_size)) {
    throw std::invalid_argument(
        d.name +
        ": the job's context has no peer information (make it with "
        "comm::Rendezvous, RunRankThreads or testing::RunRanks)");
  }
  size_t hosts = 0;
  const std::string where = DescribeHosts(context.peers, &hosts);
  if (!d.spans_hosts && hosts > 1) {
    std::string spanning;
    for (const BackendDescription* other : RegisteredBackends()) {
      if (other->spans_hosts) {
        spanning += (spanning.empty() ? "" : ", ") + other->name;
      }
    }
    throw std::invalid_argument(
        d.name + " needs every rank on one host, but this job spans " +
        std::to_string(hosts) + " hosts (" + where +
        "); use a backend that spans hosts" +
        (spanning.empty() ? std::string(" (none in this binary)")
                          : ": " + spanning));
  }
}

}  // namespace

std::unique_ptr<Communicator> CreateCommunicator(const std::string& name,
                                                 const RankContext& context,
                                                 const CommOptions& options) {
  const BackendDescription& description = BackendNamed(name);
  CheckContext(description, context);
  // The one place options enter: every backend gets tuning checked alike.
  ValidateTuning(options.tuning);
  RankContext own = context;
  std::unique_ptr<Store> store;
  std::unique_ptr<Backend> backend;
  try {
    if (context.store != nullptr) {
      // This rank's k-th communicator meets the other ranks' k-th, whether
      // the ranks are processes or threads sharing the store.
      const int64_t k = context.store->Add(
          "comm/instances/" + std::to_string(context.rank), 1);
      store = std::make_unique<PrefixStore>("comm/" + std::to_string(k - 1),
                                            context.store);
      own.store = store.get();
    }
    backend = description.create(own, options);
  } catch (const StoreError& e) {
    throw CommError(name + ": " + e.what());
  }
  auto comm = std::make_unique<Communicator>(std::move(backend), description,
                                             context.rank, context.world_size,
                                             options.tuning);
  // Where the front checks calls, it does so over connections of its own
  // when the job has a store to meet through (every rank alike: agree_ was
  // agreed, and a store and peers are the whole job's).
  if (comm->agree_ && own.store != nullptr &&
      static_cast<int>(context.peers.size()) == context.world_size) {
    comm->mesh_ = std::make_unique<CallMesh>(own, name, options.join_timeout,
                                             options.timeout);
  }
  comm->store_ = std::move(store);
  return comm;
}

RankContext GroupContext(const RankContext& job,
                         const std::vector<int>& members, Store* store) {
  RankContext group;
  group.world_size = static_cast<int>(members.size());
  for (int i = 0; i < group.world_size; ++i) {
    if (members[i] == job.rank) group.rank = i;
    if (static_cast<size_t>(members[i]) < job.peers.size()) {
      group.peers.push_back(job.peers[members[i]]);
    }
  }
  group.local_rank = job.local_rank;  // a rank's device stays its own
  group.store = store;
  group.job_secret = job.job_secret;
  return group;
}

std::unique_ptr<Communicator> CreateGroupCommunicator(
    const std::string& name, const RankContext& job,
    const std::vector<int>& members, const CommOptions& options) {
  std::string key = "group/";
  std::vector<bool> seen(std::max(job.world_size, 0));
  bool mine = false;
  for (int m : members) {
    if (m < 0 || m >= job.world_size || seen[m]) {
      throw std::invalid_argument(
          "CreateGroupCommunicator: members must be distinct ranks in [0, " +
          std::to_string(job.world_size) + "), not " + std::to_string(m));
    }
    seen[m] = true;
    mine = mine || m == job.rank;
    key += (key.back() == '/' ? "" : ",") + std::to_string(m);
  }
  if (!mine) {
    throw std::invalid_argument("CreateGroupCommunicator: rank " +
                                std::to_string(job.rank) +
                                " is not among the members");
  }
  std::unique_ptr<Store> store;
  if (job.store != nullptr) {
    store = std::make_unique<PrefixStore>(key, job.store);
  }
  auto comm = CreateCommunicator(name, GroupContext(job, members, store.get()),
                                 options);
  comm->group_store_ = std::move(store);
  return comm;
}

}  // namespace ringlab::comm
