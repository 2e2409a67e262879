#include "torch_backend/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
  // The sender of a receive from any source, once it completed.
  int sourceRank() const override { return source_; }
  void SetSource(int source) { source_ = source; }
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
  std::atomic<int> source_{-1};
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

// kStagingVariable: "1" on, "0" or unset off; anything else refused, as the
// trainer refuses a malformed RINGLAB_* variable.
bool StagingRequested() {
  const char* text = std::getenv(kStagingVariable);
  if (text == nullptr || *text == '\0' || std::string(text) == "0") {
    return false;
  }
  if (std::string(text) == "1") return true;
  throw std::invalid_argument(std::string(kStagingVariable) + "=" + text +
                              ": expected 0 or 1");
}

// What torch users and torch's own checks read in a failure: a timeout
// says "Timed out" (they match " (Timed out|closed|timeout) "), as gloo's
// do; ringlab's messages say "timed out" mid-sentence.
std::exception_ptr AsTorchSees(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const c10::Error&) {
    return failure;
  } catch (const std::exception& e) {
    std::string text = e.what();
    const size_t at = text.find("timed out");
    if (at != std::string::npos) text[at] = 'T';
    return std::make_exception_ptr(c10::Error(text, ""));
  } catch (...) {
    return failure;
  }
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
    staging_ =
        StagingRequested() && comm::BackendNamed(backend_).registers_memory;
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
    sizes_inside_ = std::make_unique<Channel>();
    sizes_inside_->comm =
        comm::CreateCommunicator(backend_, context_, options_);
    mailbox_ =
        std::make_unique<Mailbox>(context_, "torch_p2p", timeout, timeout);
    rooted_mail_ =
        std::make_unique<Mailbox>(context_, "torch_rooted", timeout, timeout);
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
  for (Channel* channel : AllChannels()) channel->thread.Stop();
  sends_.Stop();
  receives_.Stop();
  callbacks_.Stop();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::Enqueue(
    c10d::OpType type, std::vector<at::Tensor> outputs,
    const std::vector<RingCall>& calls, Task run, Turn turn) {
  auto work =
      c10::make_intrusive<RingWork>(getRank(), type, std::move(outputs));
  // Set once the Work has completed, its future's callbacks run: what a
  // later barrier waits for, as gloo's waits for the Works before it.
  auto done = std::make_shared<std::promise<void>>();
  auto complete = [work, done](std::exception_ptr failure) {
    // The future first, as gloo's: a caller whose wait() returned may read it.
    work->CompleteFuture(failure);
    work->Finish(failure);
    done->set_value();
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
  Channel& channel = turn == Turn::kSizesInside
                         ? *sizes_inside_
                         : *channels_[number % channels_.size()];
  // In the channel's order of calls, which the lock keeps.
  for (const RingCall& call : calls) {
    if (turn == Turn::kSizesInside) break;
    channel.comm->Announce(call.kind, call.count, call.type, call.op,
                           call.root);
  }
  while (!unfinished_.empty() &&
         unfinished_.front().wait_for(std::chrono::seconds(0)) ==
             std::future_status::ready) {
    unfinished_.pop_front();
  }
  std::vector<std::shared_future<void>> earlier;
  if (turn == Turn::kAfterAll) {
    earlier.assign(unfinished_.begin(), unfinished_.end());
  }
  unfinished_.push_back(done->get_future().share());
  // What was queued runs, even while the group is destroyed: the peers run
  // it too (as gloo's queue drains), and each ends by its deadline.
  const bool queued = channel.thread.Post(
      [this, &channel, number, run = std::move(run), complete, earlier] {
        std::exception_ptr failure;
        try {
          for (const std::shared_future<void>& e : earlier) e.wait();
          run(channel);
        } catch (...) {
          failure = AsTorchSees(std::current_exception());
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

std::vector<ProcessGroupRinglab::Channel*> ProcessGroupRinglab::AllChannels() {
  std::vector<Channel*> all;
  for (const std::unique_ptr<Channel>& channel : channels_) {
    all.push_back(channel.get());
  }
  all.push_back(sizes_inside_.get());
  return all;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::EnqueuePointToPoint(
    c10d::OpType type, std::vector<at::Tensor> outputs, TaskThreads& thread,
    std::function<int()> run) {
  auto work =
      c10::make_intrusive<RingWork>(getRank(), type, std::move(outputs));
  const bool queued = thread.Post([this, work, run = std::move(run)] {
    std::exception_ptr failure;
    try {
      work->SetSource(run());
    } catch (...) {
      failure = AsTorchSees(std::current_exception());
    }
    auto complete = [work, failure] {
      work->CompleteFuture(failure);
      work->Finish(failure);
    };
    if (!callbacks_.Post(complete)) complete();
  });
  TORCH_CHECK(queued, "ringlab: the process group was destroyed");
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

void ProcessGroupRinglab::StoreBarrier(uint64_t number,
                                       std::chrono::milliseconds timeout) {
  const std::string prefix = "ringlab/barrier/" + std::to_string(number);
  store_->Set(prefix + "/" + std::to_string(getRank()), "1");
  try {
    store_->Wait(comm::RankKeys(prefix, getSize()), timeout);
  } catch (const comm::StoreTimeout& e) {
    TORCH_CHECK(false, "ringlab: Timed out after ", comm::SecondsText(timeout),
                " in a barrier, rank ", getRank(), " of ", getSize(), ": ",
                e.what());
  }
}

}  // namespace ringlab::torch_backend
