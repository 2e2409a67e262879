#include "comm/adapters/gloo.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/call_agreement.h"
#include "comm/process.h"
#include "comm/store/store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Gloo's store interface over ringlab's: values are bytes either way.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(comm::Store* store, milliseconds timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->Set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_->Get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, timeout_);
  }
  void wait(const std::vector<std::string>& keys,
            const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const std::string& key : keys) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      store_->Get(key, std::max(left, milliseconds(1)));
    }
  }

 private:
  comm::Store* store_;
  milliseconds timeout_;
};

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void MaxInt64(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<int64_t*>(out);
  const auto* x = static_cast<const int64_t*>(a);
  const auto* y = static_cast<const int64_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = std::max(x[i], y[i]);
}

std::atomic<uint64_t> g_instances{0};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_(context.world_size),
        options_(options),
        prefix_("gloo/" + std::to_string(g_instances.fetch_add(1)) + "/") {
    if (context.store == nullptr) {
      throw std::invalid_argument(
          "gloo needs a rendezvous store (set MASTER_ADDR and MASTER_PORT)");
    }
    store_ = context.store;
    // Gloo writes to its sockets with writev, which raises SIGPIPE when a
    // peer has died: that would kill this rank before it could name the
    // dead one. Ignored (unless the program handles it), writev returns
    // EPIPE and Gloo reports it.
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
    // Who is who, for naming a peer that dies: pid and host of every rank.
    store_->Set(prefix_ + "pid/" + std::to_string(rank_),
                std::to_string(getpid()) + " " + HostName());
    try {
      gloo::transport::tcp::attr attr(options.gloo_address.c_str());
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto mesh = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      mesh->setTimeout(options.join_timeout);
      GlooStore adapter(store_, options.join_timeout);
      gloo::rendezvous::PrefixStore prefixed(prefix_ + "mesh", adapter);
      mesh->connectFullMesh(prefixed, device);
      mesh->setTimeout(options.timeout);
      gloo_ = mesh;
    } catch (const std::exception& e) {
      throw CommError("gloo: rank " + std::to_string(rank_) +
                      " could not connect to its peers within " +
                      Seconds(options.join_timeout) + ": " + e.what() +
                      DeadOrMissing());
    }
    peers_.assign(world_, -1);
    for (int r = 0; r < world_; ++r) {
      peers_[r] = PeerPid(r, options_.join_timeout);
    }
  }

  const char* backend() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  uint64_t bytes_sent() const override { return bytes_sent_; }

  void AllReduce(float* data, size_t count, ReduceOp op) override {
    CheckAllReduceArguments("gloo", data, count, op);
    Guarded("AllReduce", [&] {
      Agree(CallKind::kAllReduce, count, op, 0);
      if (count == 0 || world_ == 1) return;
      gloo::AllreduceOptions opts(gloo_);
      opts.setOutput(data, count);
      opts.setReduceFunction(SumFloats);
      opts.setTag(NextTag());
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) {
        const float n = static_cast<float>(world_);
        for (size_t i = 0; i < count; ++i) data[i] /= n;
      }
    });
    bytes_sent_ += AllReduceBusBytes(count, world_);
  }

  void Broadcast(float* data, size_t count, int root) override {
    CheckBroadcastArguments("gloo", data, count, root, world_);
    Guarded("Broadcast", [&] {
      Agree(CallKind::kBroadcast, count, ReduceOp::kSum, root);
      if (count == 0 || world_ == 1) return;
      gloo::BroadcastOptions opts(gloo_);
      opts.setOutput(data, count);
      opts.setRoot(root);
      opts.setTag(NextTag());
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
    bytes_sent_ += BroadcastBusBytes(count, world_);
  }

  void AllGather(const float* send, float* recv, size_t count) override {
    CheckAllGatherArguments("gloo", send, recv, count, rank_, world_);
    float* own = recv + static_cast<size_t>(rank_) * count;
    Guarded("AllGather", [&] {
      Agree(CallKind::kAllGather, count, ReduceOp::kSum, 0);
      if (count == 0) return;
      if (world_ == 1) {
        if (send != own) std::memcpy(own, send, count * sizeof(float));
        return;
      }
      gloo::AllgatherOptions opts(gloo_);
      // Without an input Gloo gathers in place, from the rank's own block;
      // it only reads the input (its API takes no const pointers).
      if (send != own) opts.setInput(const_cast<float*>(send), count);
      opts.setOutput(recv, count * world_);
      opts.setTag(NextTag());
      opts.setTimeout(options_.timeout);
      gloo::allgather(opts);
    });
    bytes_sent_ += AllGatherBusBytes(count, world_);
  }

  void Barrier() override {
    Guarded("Barrier", [&] {
      Agree(CallKind::kBarrier, 0, ReduceOp::kSum, 0);
      if (world_ == 1) return;
      gloo::BarrierOptions opts(gloo_);
      opts.setTag(NextTag());
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

 private:
  static std::string HostName() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return name;
  }
  static std::string Seconds(milliseconds t) {
    return std::to_string(std::chrono::duration<double>(t).count()) + " s";
  }
  uint32_t NextTag() { return static_cast<uint32_t>(++tags_ & 0x3fffffff); }

  // Rank r's pid as it published it; -1 for a rank on another host (a pid
  // names this process only on the same host). Throws if it never did.
  pid_t PeerPid(int r, milliseconds timeout) const {
    const std::string v =
        store_->Get(prefix_ + "pid/" + std::to_string(r), timeout);
    const size_t space = v.find(' ');
    if (space == std::string::npos || v.substr(space + 1) != HostName()) {
      return -1;
    }
    return static_cast<pid_t>(std::stol(v.substr(0, space)));
  }

  // Why joining failed, in terms of ranks: those that died after saying
  // who they are, those that never did. A dying peer may take a moment to
  // be seen gone.
  std::string DeadOrMissing() const {
    const auto until = Clock::now() + milliseconds(1000);
    std::string blame;
    do {
      blame.clear();
      for (int r = 0; r < world_; ++r) {
        if (r == rank_) continue;
        try {
          const pid_t pid = PeerPid(r, milliseconds(1));
          if (ProcessExited(pid)) {
            blame += "; rank " + std::to_string(r) + " (pid " +
                     std::to_string(pid) + ") died while the ranks joined";
          }
        } catch (const std::exception&) {
          blame += "; rank " + std::to_string(r) + " never joined";
        }
      }
      if (!blame.empty()) return blame;
      std::this_thread::sleep_for(milliseconds(10));
    } while (Clock::now() < until);
    return blame;
  }

  // Runs fn; Gloo's failures become a CommError that names a peer that has
  // died, when one has (it may take a moment to be seen gone).
  template <typename Fn>
  void Guarded(const char* what, Fn fn) {
    if (!broken_.empty()) {
      throw CommError("gloo: unusable after an earlier error: " + broken_);
    }
    try {
      fn();
    } catch (const CommError&) {
      throw;  // a mismatch, reported on every rank, before any data moved
    } catch (const std::exception& e) {
      broken_ = Explain(what, e.what());
      throw CommError(broken_);
    }
  }

  std::string Explain(const char* what, const std::string& error) const {
    const auto until = Clock::now() + milliseconds(1000);
    do {
      for (int r = 0; r < world_; ++r) {
        if (r != rank_ && ProcessExited(peers_[r])) {
          return "gloo: rank " + std::to_string(r) + " (pid " +
                 std::to_string(peers_[r]) + ") died during " + what + ": " +
                 error;
        }
      }
      std::this_thread::sleep_for(milliseconds(10));
    } while (Clock::now() < until);
    const bool timed_out = error.find("imed out") != std::string::npos;
    std::string peers;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_)
        peers += (peers.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    return "gloo: " +
           (timed_out ? "timed out after " + Seconds(options_.timeout) + " "
                      : std::string()) +
           "in " + what + " waiting for " + peers + ": " + error;
  }

  // Gloo does not notice ranks that disagree on a call (call_agreement.h).
  void Agree(CallKind kind, size_t count, ReduceOp op, int root) {
    if (world_ == 1) return;
    const CallDescription call{static_cast<int64_t>(++calls_), kind, count, op,
                               root};
    int64_t buf[kAgreementWords];
    EncodeForAgreement(call, buf);
    gloo::AllreduceOptions opts(gloo_);
    opts.setOutput(buf, kAgreementWords);
    opts.setReduceFunction(MaxInt64);
    opts.setTag(NextTag());
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
    ThrowUnlessAgreed("gloo", rank_, call, buf);
  }

  const int rank_, world_;
  const CommOptions options_;
  const std::string prefix_;
  comm::Store* store_ = nullptr;
  std::shared_ptr<gloo::Context> gloo_;
  std::vector<pid_t> peers_;  // -1 where the peer is on another host
  uint64_t calls_ = 0;
  uint64_t tags_ = 0;
  uint64_t bytes_sent_ = 0;
  std::string broken_;
};

const bool kRegistered = RegisterCommunicator(
    "gloo", [](const RankContext& context, const CommOptions& options) {
      return CreateGlooCommunicator(context, options);
    });

}  // namespace

std::unique_ptr<Communicator> CreateGlooCommunicator(
    const RankContext& context, const CommOptions& options) {
  return std::make_unique<GlooCommunicator>(context, options);
}

}  // namespace ringlab::comm
