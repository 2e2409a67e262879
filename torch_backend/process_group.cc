#include "torch_backend/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <stdexcept>

#include "comm/backend.h"
#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"
#include "comm/job/rendezvous.h"
#include "comm/peers.h"
#include "comm/store/job_secret.h"
#include "comm/tuning_env.h"
#include "torch_backend/torch_store.h"

namespace ringlab::torch_backend {

// A collective's Work: torch's own completion state (wait, isCompleted,
// exception) and a future DDP chains its buckets' callbacks on, both set on
// a callback thread once a communication thread has run the collective.
class ProcessGroupRinglab::RingWork : public c10d::Work {
 public:
  RingWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return future_;
  }
  // What wait() and isCompleted() see.
  void Finish(std::exception_ptr failure) { finish(failure); }
  // The future, whose callbacks run here (on the callback thread).
  void CompleteFuture(std::exception_ptr failure) {
    if (failure) {
      future_->setError(failure);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

namespace {

constexpr char kSecretKey[] = "ringlab/job_secret";

// The address this host reaches MASTER_ADDR from (what its peers on other
// hosts reach it at); loopback without one.
std::string AddressTowardStore() {
  const char* master = std::getenv(comm::launch::kMasterAddr);
  if (master == nullptr || *master == '\0') return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(master, "9", &hints, &found) != 0) return "127.0.0.1";
  std::string address = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  // A datagram socket's connect sends nothing: it only picks the route.
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) {
      address = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

// Rank 0 draws the job's secret; the others read it from the store.
std::string ShareJobSecret(comm::Store& store, int rank,
                           std::chrono::milliseconds timeout) {
  if (rank == 0) {
    const std::string secret = comm::GenerateJobSecret();
    store.Set(kSecretKey, comm::JobSecretToHex(secret));
    return secret;
  }
  return comm::JobSecretFromHex(store.Get(kSecretKey, timeout),
                                "torch's store");
}

// Rank 0's channel count, for every rank: the k-th communicator of each
// rank must meet the others' k-th, so a rank whose environment differs must
// not make more or fewer.
int ShareChannelCount(comm::Store& store, int rank, int own,
                      std::chrono::milliseconds timeout) {
  constexpr char kKey[] = "ringlab/channels";
  if (rank == 0) {
    store.Set(kKey, std::to_string(own));
    return own;
  }
  return std::stoi(store.Get(kKey, timeout));
}

// This rank's index among the ranks of its host.
int LocalRank(const std::vector<comm::PeerInfo>& peers, int rank) {
  const std::vector<int> local = comm::RanksOnHostOf(peers, rank);
  return static_cast<int>(std::find(local.begin(), local.end(), rank) -
                          local.begin());
}

size_t HostCount(const std::vector<comm::PeerInfo>& peers) {
  size_t hosts = 0;
  comm::DescribeHosts(peers, &hosts);
  return hosts;
}

// The communicator the trainer would choose for ranks on `hosts` hosts:
// shm_ring where its description admits them (one host), else gloo, which
// spans hosts.
std::string ChooseBackend(size_t hosts) {
  for (const char* name : {"shm_ring", "gloo"}) {
    if (hosts == 1 || comm::BackendNamed(name).spans_hosts) return name;
  }
  throw comm::CommError("ringlab: no backend spans the " +
                        std::to_string(hosts) + " hosts of this group");
}

// kChannelsVariable where set (1 to 8), else 2 across hosts and 1 on one.
int ChannelCount(bool across_hosts) {
  const char* text = std::getenv(kChannelsVariable);
  if (text == nullptr || *text == '\0') return across_hosts ? 2 : 1;
  char* end = nullptr;
  const long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > 8) {
    throw std::invalid_argument(std::string(kChannelsVariable) + "=" + text +
                                ": expected a number of channels, 1 to 8");
  }
  return static_cast<int>(n);
}

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "ringlab: ", what,
              ": only CPU tensors so far, not ", t.device());
  TORCH_CHECK(t.is_contiguous(), "ringlab: ", what,
              ": the tensor must be contiguous");
}

// The communicator's element type for `t`, where it has one.
bool RingType(const at::Tensor& t, comm::DataType* type) {
  switch (t.scalar_type()) {
    case at::kFloat:
      *type = comm::DataType::kFloat32;
      return true;
    case at::kHalf:
      *type = comm::DataType::kFloat16;
      return true;
    case at::kBFloat16:
      *type = comm::DataType::kBFloat16;
      return true;
    default:
      return false;
  }
}

bool RingOp(const c10d::ReduceOp& op, comm::ReduceOp* ring) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      *ring = comm::ReduceOp::kSum;
      return true;
    case c10d::ReduceOp::AVG:
      *ring = comm::ReduceOp::kAvg;
      return true;
    case c10d::ReduceOp::MAX:
      *ring = comm::ReduceOp::kMax;
      return true;
    case c10d::ReduceOp::MIN:
      *ring = comm::ReduceOp::kMin;
      return true;
    default:
      return false;
  }
}

// Whether the rows of a gathered tensor can reduce by `op` for `t`'s type
// (torch's own ops on them); otherwise a RuntimeError, as gloo's.
void CheckGatheredReduction(const at::Tensor& t, c10d::ReduceOp::RedOpType op) {
  const at::ScalarType s = t.scalar_type();
  const bool integral = at::isIntegralType(s, /*includeBool=*/true);
  TORCH_CHECK(integral || at::isFloatingType(s), "ringlab: allreduce of ", s,
              ": only real and integer types reduce");
  switch (op) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PRODUCT:
      return;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      TORCH_CHECK(s != at::kBool, "ringlab: min and max of Bool do not reduce");
      return;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK(integral,
                  "ringlab: bitwise reductions need an integer type, "
                  "not ",
                  s);
      return;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(false, "ringlab: allreduce avg of ", s,
                  ": only floating types average");
    default:
      TORCH_CHECK(false, "ringlab: this reduction op (", static_cast<int>(op),
                  ") is not supported");
  }
}

// What a copying collective moves: the tensor's own type where ringlab has
// it, else its bytes as 4- or 2-byte words (DDP broadcasts and gathers int64
// metadata too); the bits arrive unchanged either way. False for an odd
// count of bytes.
bool CopiedWords(const at::Tensor& t, comm::DataType* type, size_t* count) {
  if (RingType(t, type)) {
    *count = static_cast<size_t>(t.numel());
    return true;
  }
  const size_t bytes = t.nbytes();
  *type = bytes % 4 == 0 ? comm::DataType::kFloat32 : comm::DataType::kFloat16;
  *count = bytes / comm::DataTypeSize(*type);
  return bytes % 2 == 0;
}

}  // namespace

ProcessGroupRinglab::ProcessGroupRinglab(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size) {
  try {
    store_ = std::make_unique<TorchStore>(store);
    context_.rank = rank;
    context_.world_size = size;
    context_.store = store_.get();
    context_.job_secret = ShareJobSecret(*store_, rank, timeout);
    context_.peers =
        comm::GatherPeers(*store_, rank, size, AddressTowardStore(),
                          comm::ThisHostIdentity(), timeout);
    context_.local_rank = LocalRank(context_.peers, rank);
    const size_t hosts = HostCount(context_.peers);
    backend_ = ChooseBackend(hosts);
    const char* staging = std::getenv(kStagingVariable);
    staging_ = staging != nullptr && std::string(staging) == "1" &&
               comm::BackendNamed(backend_).registers_memory;
    options_.tuning =
        comm::TuningFromEnvironment();  // RINGLAB_*, as the trainer
    options_.timeout = timeout;
    options_.join_timeout = timeout;
    const int channels = ShareChannelCount(
        *store_, rank, ChannelCount(/*across_hosts=*/hosts > 1), timeout);
    for (int c = 0; c < channels; ++c) {
      channels_.push_back(std::make_unique<Channel>());
      channels_.back()->comm =
          comm::CreateCommunicator(backend_, context_, options_);
    }
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ringlab: rank ", rank, " of ", size,
                " could not join its group: ", e.what());
  }
}

std::unique_ptr<comm::Communicator> ProcessGroupRinglab::CreateCommunicator() {
  return comm::CreateCommunicator(backend_, context_, options_);
}

ProcessGroupRinglab::~ProcessGroupRinglab() {
  // No collective task holds a reference to the group, so this never runs on
  // a communication thread.
  {
    std::lock_guard<std::mutex> order(enqueue_);
    stopping_ = true;
  }
  for (const std::unique_ptr<Channel>& channel : channels_) {
    channel->thread.Stop();
  }
  callbacks_.Stop();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::Enqueue(
    c10d::OpType type, std::vector<at::Tensor> outputs, const RingCall& call,
    Task run, bool after_all) {
  auto work =
      c10::make_intrusive<RingWork>(getRank(), type, std::move(outputs));
  auto complete = [work](std::exception_ptr failure) {
    // The future first, as gloo's: a caller whose wait() returned may read it.
    work->CompleteFuture(failure);
    work->Finish(failure);
  };
  std::lock_guard<std::mutex> order(enqueue_);
  // A call while the group is destroyed (from a callback): refused on every
  // channel alike, so that no peer waits for half of them.
  if (stopping_) {
    complete(std::make_exception_ptr(
        comm::CommError("ringlab: the process group was destroyed")));
    return work;
  }
  const uint64_t number = next_call_++;
  Channel& channel = *channels_[number % channels_.size()];
  // In the channel's order of calls, which the lock keeps.
  channel.comm->Announce(call.kind, call.count, call.type, call.op, call.root);
  // The other channels' earlier calls have run once a marker queued behind
  // them has (a channel runs its tasks in order).
  std::vector<std::shared_future<void>> earlier;
  for (const std::unique_ptr<Channel>& other : channels_) {
    if (!after_all || other.get() == &channel) continue;
    auto reached = std::make_shared<std::promise<void>>();
    earlier.push_back(reached->get_future().share());
    if (!other->thread.Post([reached] { reached->set_value(); })) {
      reached->set_value();
    }
  }
  // What was queued runs, even while the group is destroyed: the peers run
  // it too (as gloo's queue drains), and each ends by its deadline.
  const bool queued = channel.thread.Post(
      [this, &channel, number, run = std::move(run), complete, earlier] {
        std::exception_ptr failure;
        try {
          for (const std::shared_future<void>& e : earlier) e.wait();
          run(channel);
        } catch (...) {
          failure = std::current_exception();
        }
        CompleteInOrder(number, [complete, failure] { complete(failure); });
      });
  if (!queued) {  // unreachable: the channels stop only after stopping_
    CompleteInOrder(number, [complete] {
      complete(std::make_exception_ptr(
          comm::CommError("ringlab: the process group was destroyed")));
    });
  }
  return work;
}

void ProcessGroupRinglab::CompleteInOrder(uint64_t call,
                                          Completion completion) {
  std::lock_guard<std::mutex> lock(completing_);
  finished_early_.emplace(call, std::move(completion));
  for (auto next = finished_early_.find(next_completion_);
       next != finished_early_.end();
       next = finished_early_.find(next_completion_)) {
    Completion ready = std::move(next->second);
    finished_early_.erase(next);
    ++next_completion_;
    if (!callbacks_.Post(ready)) ready();  // unreachable: callbacks stop last
  }
}

ProcessGroupRinglab::RingCall ProcessGroupRinglab::GatherCall(size_t bytes) {
  // float32 words: every backend moves them.
  return {comm::CallKind::kAllGather, (bytes + 3) / 4};
}

at::Tensor ProcessGroupRinglab::GatherBytes(comm::Communicator& comm,
                                            const void* data, size_t bytes) {
  const size_t words = GatherCall(bytes).count;
  at::Tensor mine = at::zeros({static_cast<int64_t>(words * 4)}, at::kByte);
  if (bytes > 0) std::memcpy(mine.data_ptr(), data, bytes);
  at::Tensor rows =
      at::empty({getSize(), static_cast<int64_t>(words * 4)}, at::kByte);
  comm.AllGather(mine.data_ptr(), rows.data_ptr(), words,
                 comm::DataType::kFloat32);
  return rows;
}

void ProcessGroupRinglab::StagedAllReduce(Channel& channel, const at::Tensor& t,
                                          comm::DataType type,
                                          comm::ReduceOp op) {
  const size_t bytes = t.nbytes();
  if (bytes > channel.staged_bytes) {
    size_t grown = std::max<size_t>(channel.staged_bytes, 4096);
    while (grown < bytes) grown *= 2;
    channel.staged = channel.comm->Allocate(grown / sizeof(float));
    channel.staged_bytes = grown;
  }
  std::memcpy(channel.staged, t.data_ptr(), bytes);
  channel.comm->AllReduce(channel.staged, static_cast<size_t>(t.numel()), type,
                          op);
  std::memcpy(t.data_ptr(), channel.staged, bytes);
}

void ProcessGroupRinglab::GatheredAllReduce(comm::Communicator& comm,
                                            const at::Tensor& t,
                                            c10d::ReduceOp op) {
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  const at::Tensor rows = GatherBytes(comm, t.data_ptr(), t.nbytes())
                              .narrow(1, 0, bytes)
                              .contiguous()
                              .view(t.scalar_type());
  at::Tensor result;
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      result = rows.sum(0, false, t.scalar_type());
      break;
    case c10d::ReduceOp::PRODUCT:
      result = rows.prod(0, false, t.scalar_type());
      break;
    case c10d::ReduceOp::MIN:
      result = rows.amin(0);
      break;
    case c10d::ReduceOp::MAX:
      result = rows.amax(0);
      break;
    default:  // the bitwise ones (checked by the caller)
      result = rows[0].clone();
      for (int r = 1; r < getSize(); ++r) {
        if (op.op_ == c10d::ReduceOp::BAND) result.bitwise_and_(rows[r]);
        if (op.op_ == c10d::ReduceOp::BOR) result.bitwise_or_(rows[r]);
        if (op.op_ == c10d::ReduceOp::BXOR) result.bitwise_xor_(rows[r]);
      }
  }
  t.view(-1).copy_(result);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: broadcast takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  comm::DataType type;
  size_t count;
  if (CopiedWords(t, &type, &count)) {
    return Enqueue(
        c10d::OpType::BROADCAST, {t},
        {comm::CallKind::kBroadcast, count, type, comm::ReduceOp::kSum, root},
        [t, type, count, root](Channel& channel) {
          channel.comm->Broadcast(t.data_ptr(), count, type, root);
        });
  }
  // An odd count of bytes, through a copy padded to whole 2-byte words.
  const size_t words = (t.nbytes() + 1) / 2;
  return Enqueue(c10d::OpType::BROADCAST, {t},
                 {comm::CallKind::kBroadcast, words, comm::DataType::kFloat16,
                  comm::ReduceOp::kSum, root},
                 [t, words, root](Channel& channel) {
                   at::Tensor padded =
                       at::zeros({static_cast<int64_t>(2 * words)}, at::kByte);
                   std::memcpy(padded.data_ptr(), t.data_ptr(), t.nbytes());
                   channel.comm->Broadcast(padded.data_ptr(), words,
                                           comm::DataType::kFloat16, root);
                   std::memcpy(t.data_ptr(), padded.data_ptr(), t.nbytes());
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: allreduce takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "allreduce");
  comm::DataType type;
  comm::ReduceOp op;
  const comm::BackendDescription& backend =
      channels_.front()->comm->description();
  if (RingType(t, &type) && RingOp(opts.reduceOp, &op) &&
      backend.Supports(type) && backend.Supports(op)) {
    return Enqueue(
        c10d::OpType::ALLREDUCE, {t},
        {comm::CallKind::kAllReduce, static_cast<size_t>(t.numel()), type, op},
        [this, t, type, op](Channel& channel) {
          if (staging_) return StagedAllReduce(channel, t, type, op);
          channel.comm->AllReduce(t.data_ptr(), static_cast<size_t>(t.numel()),
                                  type, op);
        });
  }
  CheckGatheredReduction(t, opts.reduceOp.op_);
  return Enqueue(c10d::OpType::ALLREDUCE, {t}, GatherCall(t.nbytes()),
                 [this, t, op = opts.reduceOp](Channel& channel) {
                   GatheredAllReduce(*channel.comm, t, op);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "ringlab: allgather takes one input and one list of outputs");
  const at::Tensor in = inputs[0];
  CheckTensor(in, "allgather");
  const std::vector<at::Tensor> out = outputs[0];
  TORCH_CHECK(static_cast<int>(out.size()) == getSize(),
              "ringlab: allgather needs one output per rank");
  for (const at::Tensor& o : out) {
    CheckTensor(o, "allgather");
    TORCH_CHECK(o.scalar_type() == in.scalar_type() && o.numel() == in.numel(),
                "ringlab: allgather's outputs must match its input");
  }
  return Enqueue(c10d::OpType::ALLGATHER, out, GatherCall(in.nbytes()),
                 [this, in, out](Channel& c) {
                   const at::Tensor rows =
                       GatherBytes(*c.comm, in.data_ptr(), in.nbytes());
                   for (int r = 0; r < getSize(); ++r) {
                     std::memcpy(out[r].data_ptr(), rows[r].data_ptr(),
                                 in.nbytes());
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions&) {
  CheckTensor(input, "allgather");
  CheckTensor(output, "allgather");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == getSize() * input.numel(),
              "ringlab: allgather's output must hold every rank's input");
  const at::Tensor in = input, out = output;
  comm::DataType type;
  size_t count;
  if (CopiedWords(in, &type, &count)) {
    return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out},
                   {comm::CallKind::kAllGather, count, type},
                   [in, out, type, count](Channel& channel) {
                     channel.comm->AllGather(in.data_ptr(), out.data_ptr(),
                                             count, type);
                   });
  }
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, GatherCall(in.nbytes()),
                 [this, in, out](Channel& c) {
                   const at::Tensor rows =
                       GatherBytes(*c.comm, in.data_ptr(), in.nbytes());
                   for (int r = 0; r < getSize(); ++r) {
                     std::memcpy(
                         static_cast<char*>(out.data_ptr()) + r * in.nbytes(),
                         rows[r].data_ptr(), in.nbytes());
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::barrier(
    const c10d::BarrierOptions&) {
  // As gloo's barrier: it also waits for the calls before it.
  return Enqueue(
      c10d::OpType::BARRIER, {}, {comm::CallKind::kBarrier},
      [](Channel& c) { c.comm->Barrier(); }, /*after_all=*/true);
}

}  // namespace ringlab::torch_backend
