#include "torch_backend/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <stdexcept>

#include "comm/job/job_environment.h"
#include "comm/job/launch_variables.h"
#include "comm/peers.h"
#include "comm/store/job_secret.h"
#include "torch_backend/torch_store.h"

namespace ringlab::torch_backend {

// A collective's Work: torch's own completion state (wait, isCompleted,
// exception) and a future DDP chains its buckets' callbacks on, both set on
// the communication thread.
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
  // The future, whose callbacks run here (on CallbackThreads).
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

// This rank's index among the ranks of its host.
int LocalRank(const std::vector<comm::PeerInfo>& peers, int rank) {
  int local = 0;
  for (int r = 0; r < rank; ++r) local += peers[r].SameHost(peers[rank]);
  return local;
}

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "ringlab: ", what,
              ": only CPU tensors so far, not ", t.device());
  TORCH_CHECK(t.is_contiguous(), "ringlab: ", what,
              ": the tensor must be contiguous");
}

// The element type of a reduction: float32, float16 or bfloat16.
comm::DataType ReducedType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return comm::DataType::kFloat32;
    case at::kHalf:
      return comm::DataType::kFloat16;
    case at::kBFloat16:
      return comm::DataType::kBFloat16;
    default:
      throw std::invalid_argument(
          std::string("ringlab: allreduce of ") +
          c10::toString(t.scalar_type()) +
          ": only float32, float16 and bfloat16 reduce");
  }
}

// What a copying collective moves: the tensor's own type where ringlab has
// it, else its bytes as 4- or 2-byte words (DDP broadcasts and gathers int64
// metadata too); the bits arrive unchanged either way.
std::pair<comm::DataType, size_t> CopiedWords(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  if (s == at::kFloat || s == at::kHalf || s == at::kBFloat16) {
    return {ReducedType(t), static_cast<size_t>(t.numel())};
  }
  const size_t bytes = t.nbytes();
  if (bytes % 4 == 0) return {comm::DataType::kFloat32, bytes / 4};
  TORCH_CHECK(bytes % 2 == 0, "ringlab: a ", s, " tensor of ", bytes,
              " bytes (an odd count of bytes) cannot be sent yet");
  return {comm::DataType::kFloat16, bytes / 2};
}

comm::ReduceOp RingOp(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return comm::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return comm::ReduceOp::kAvg;
    default:
      throw std::invalid_argument("ringlab: only sum and avg reduce so far");
  }
}

}  // namespace

CallbackThreads::~CallbackThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void CallbackThreads::Post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  // A thread already woken for an earlier task still counts as idle.
  if (tasks_.size() > static_cast<size_t>(idle_)) {
    threads_.emplace_back([this] { ThreadMain(); });
  } else {
    changed_.notify_one();
  }
}

void CallbackThreads::ThreadMain() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    ++idle_;
    changed_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopped, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();  // callbacks report their own failures through their futures
    lock.lock();
  }
}

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
    comm::PeerInfo mine = comm::ThisPeer(AddressTowardStore());
    mine.host = comm::ThisHostIdentity();
    context_.peers = comm::ExchangePeers(*store_, rank, size, mine, timeout);
    context_.local_rank = LocalRank(context_.peers, rank);
    size_t hosts = 0;
    comm::DescribeHosts(context_.peers, &hosts);
    backend_ = hosts == 1 ? "shm_ring" : "gloo";
    comm::CommOptions options;
    options.timeout = timeout;
    options.join_timeout = timeout;
    comm_ = comm::CreateCommunicator(backend_, context_, options);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ringlab: rank ", rank, " of ", size,
                " could not join its group: ", e.what());
  }
  thread_ = std::thread([this] { ThreadMain(); });
}

ProcessGroupRinglab::~ProcessGroupRinglab() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();  // a collective in flight ends by the communicator's deadline
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::Enqueue(
    c10d::OpType type, std::vector<at::Tensor> outputs,
    std::function<void()> run) {
  auto work =
      c10::make_intrusive<RingWork>(getRank(), type, std::move(outputs));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stop_) {
      queue_.push_back({work, std::move(run)});
      changed_.notify_all();
      return work;
    }
  }
  // A callback's collective while the group is destroyed: nothing will run it.
  const std::exception_ptr failure = std::make_exception_ptr(
      comm::CommError("ringlab: the process group was destroyed"));
  work->CompleteFuture(failure);
  work->Finish(failure);
  return work;
}

void ProcessGroupRinglab::ThreadMain() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped, nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // What was queued runs, even while the group is destroyed: the peers run
    // it too (as gloo's queue drains), and each ends by its deadline.
    std::exception_ptr failure;
    try {
      job.run();
    } catch (...) {
      failure = std::current_exception();
    }
    // The future first, as gloo's: a caller whose wait() returned may read it.
    callbacks_.Post([work = job.work, failure] {
      work->CompleteFuture(failure);
      work->Finish(failure);
    });
    lock.lock();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: broadcast takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "broadcast");
  const auto [type, count] = CopiedWords(t);
  const int root = static_cast<int>(opts.rootRank);
  return Enqueue(c10d::OpType::BROADCAST, {t},
                 [this, t, type = type, count = count, root] {
                   comm_->Broadcast(t.data_ptr(), count, type, root);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "ringlab: allreduce takes one tensor");
  const at::Tensor t = tensors[0];
  CheckTensor(t, "allreduce");
  const comm::DataType type = ReducedType(t);
  const comm::ReduceOp op = RingOp(opts.reduceOp);
  return Enqueue(c10d::OpType::ALLREDUCE, {t}, [this, t, type, op] {
    comm_->AllReduce(t.data_ptr(), static_cast<size_t>(t.numel()), type, op);
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
    TORCH_CHECK(o.scalar_type() == in.scalar_type() &&
                    o.numel() == in.numel() && o.device() == in.device(),
                "ringlab: allgather's outputs must match its input");
  }
  const auto [type, count] = CopiedWords(in);
  return Enqueue(
      c10d::OpType::ALLGATHER, out,
      [this, in, out, type = type, count = count] {
        at::Tensor gathered = at::empty({getSize() * in.numel()}, in.options());
        comm_->AllGather(in.data_ptr(), gathered.data_ptr(), count, type);
        for (int r = 0; r < getSize(); ++r) {
          out[r].view(-1).copy_(gathered.narrow(0, r * in.numel(), in.numel()));
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
  const auto [type, count] = CopiedWords(input);
  const at::Tensor in = input, out = output;
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, {out},
                 [this, in, out, type = type, count = count] {
                   comm_->AllGather(in.data_ptr(), out.data_ptr(), count, type);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRinglab::barrier(
    const c10d::BarrierOptions&) {
  return Enqueue(c10d::OpType::BARRIER, {}, [this] { comm_->Barrier(); });
}

}  // namespace ringlab::torch_backend
