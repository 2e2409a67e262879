#include "comm/adapters/gloo.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/backend.h"
#include "comm/dtype/kernels.h"
#include "comm/store/prefix_store.h"
#include "comm/store/store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

// Gloo's store interface over ringlab's: values are bytes either way, and
// waiting is the store's.
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
    store_->Wait(keys, timeout_);
  }
  void wait(const std::vector<std::string>& keys,
            const milliseconds& timeout) override {
    store_->Wait(keys, timeout);
  }

 private:
  comm::Store* store_;
  milliseconds timeout_;
};

// Calls fn with a value of the C++ type gloo moves `type` as (float, or
// 2-byte words for the 16-bit types, which gloo only moves).
template <typename Fn>
void ForElement(DataType type, Fn fn) {
  if (type == DataType::kFloat32) {
    fn(float{});
  } else {
    fn(uint16_t{});
  }
}

// The reduction gloo applies at every hop: comm/dtype's kernels. 16-bit
// sums are rounded after each hop, as gloo's own float16 sum rounds (so
// torch's fp16_compress_hook over gloo and this agree bit for bit); max and
// min are comm/dtype's too.
gloo::AllreduceOptions::Func ReduceFunction(DataType type, ReduceOp op) {
  const dtype::ElementKernels& k = dtype::KernelsFor(type);
  return op == ReduceOp::kMax   ? k.maximum
         : op == ReduceOp::kMin ? k.minimum
                                : k.add;
}

// One Gloo device (its epoll loop thread) per address and process, shared by
// every communicator bound there, as torch's ProcessGroupGloo shares one
// device among its contexts: a second communicator (torch_backend's second
// channel) then adds connections, not a thread that competes for the cores.
// Keyed by the process too: a forked child inherits the cache but not the
// device's thread.
std::shared_ptr<gloo::transport::Device> SharedDevice(
    const std::string& address) {
  static std::mutex mutex;
  static auto* devices = new std::map<std::pair<pid_t, std::string>,
                                      std::weak_ptr<gloo::transport::Device>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::weak_ptr<gloo::transport::Device>& cached =
      (*devices)[{getpid(), address}];
  std::shared_ptr<gloo::transport::Device> device = cached.lock();
  if (!device) {
    gloo::transport::tcp::attr attr(address.c_str());
    device = gloo::transport::tcp::CreateDevice(attr);
    cached = device;
  }
  return device;
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_(context.world_size),
        timeout_(options.timeout),
        watch_(context.peers, context.rank) {
    // Gloo writes to its sockets with writev, which raises SIGPIPE when a
    // peer has died: that would kill this rank before it could name the
    // dead one. Ignored (unless the program handles it), writev returns
    // EPIPE and Gloo reports it.
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
    // The address this rank reached the job's store from is one its peers
    // reach it at: Gloo's pairs listen there.
    const std::string& own = context.peers[rank_].address;
    const std::string address = own.empty() ? "127.0.0.1" : own;
    try {
      std::shared_ptr<gloo::transport::Device> device = SharedDevice(address);
      auto mesh = std::make_shared<gloo::rendezvous::Context>(rank_, world_);
      mesh->setTimeout(options.join_timeout);
      GlooStore adapter(context.store, options.join_timeout);
      mesh->connectFullMesh(adapter, device);
      mesh->setTimeout(options.timeout);
      gloo_ = mesh;
    } catch (const std::exception& e) {
      throw CommError("gloo: rank " + std::to_string(rank_) +
                      " could not connect to its peers within " +
                      SecondsText(options.join_timeout) + " on " + address +
                      ": " + e.what() + DeadPeers());
    }
  }

  void AllReduce(void* data, size_t count, DataType type,
                 ReduceOp op) override {
    Guarded("AllReduce", [&] {
      gloo::AllreduceOptions opts(gloo_);
      ForElement(type, [&](auto element) {
        opts.setOutput(static_cast<decltype(element)*>(data), count);
      });
      opts.setReduceFunction(ReduceFunction(type, op));
      Run(opts, gloo::allreduce);
      // The sum, divided once (rounded once more for the 16-bit types).
      if (op == ReduceOp::kAvg) {
        dtype::KernelsFor(type).scale(data, static_cast<float>(world_), count);
      }
    });
  }

  void Broadcast(void* data, size_t count, DataType type, int root) override {
    Guarded("Broadcast", [&] {
      gloo::BroadcastOptions opts(gloo_);
      ForElement(type, [&](auto element) {
        opts.setOutput(static_cast<decltype(element)*>(data), count);
      });
      opts.setRoot(root);
      Run(opts, gloo::broadcast);
    });
  }

  void AllGather(const void* send, void* recv, size_t count,
                 DataType type) override {
    Guarded("AllGather", [&] {
      ForElement(type, [&](auto element) {
        using T = decltype(element);
        T* gathered = static_cast<T*>(recv);
        const T* own = gathered + static_cast<size_t>(rank_) * count;
        gloo::AllgatherOptions opts(gloo_);
        // Without an input Gloo gathers in place, from the rank's own
        // block; it only reads the input (its API takes no const pointers).
        if (send != own) {
          opts.setInput(const_cast<T*>(static_cast<const T*>(send)), count);
        }
        opts.setOutput(gathered, count * world_);
        Run(opts, gloo::allgather);
      });
    });
  }

  void Barrier() override {
    Guarded("Barrier", [&] {
      gloo::BarrierOptions opts(gloo_);
      Run(opts, gloo::barrier);
    });
  }

  // The ranks' agreement at creation on whether to check calls (the calls'
  // own checks then run over the front's connections, gloo always having a
  // store): one allgather and a local maximum take N-1 ring steps where
  // Gloo's allreduce takes 2(N-1), for words that are a few dozen bytes.
  void MaxOverRanks(int64_t* words, size_t count) override {
    Guarded("a call check", [&] {
      std::vector<int64_t> gathered(count * static_cast<size_t>(world_));
      gloo::AllgatherOptions opts(gloo_);
      opts.setInput(words, count);
      opts.setOutput(gathered.data(), gathered.size());
      Run(opts, gloo::allgather);
      for (size_t r = 0; r < gathered.size(); r += count) {
        for (size_t i = 0; i < count; ++i) {
          words[i] = std::max(words[i], gathered[r + i]);
        }
      }
    });
  }

 private:
  template <typename Options, typename Algorithm>
  void Run(Options& opts, Algorithm algorithm) {
    opts.setTag(static_cast<uint32_t>(++tags_ & 0x3fffffff));
    opts.setTimeout(timeout_);
    algorithm(opts);
  }

  // Every peer on this host that has exited, looking for up to a second for
  // one (a peer that broke a connection by dying may take a moment to be
  // seen gone).
  std::string ExitedPeers() const {
    return watch_.ExitedWithin(milliseconds(1000));
  }

  std::string DeadPeers() const {
    const std::string dead = ExitedPeers();
    return dead.empty() ? "" : "; " + dead + " died while the ranks joined";
  }

  // Runs fn; Gloo's failures become a CommError that names a peer that has
  // died, when one has.
  template <typename Fn>
  void Guarded(const char* what, Fn fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw CommError(Explain(what, e.what()));
    }
  }

  // Every peer that has exited is named, not only the lowest: a peer that
  // failed because another died may be seen gone first (CI saw rank 0 name
  // only rank 1, which had exited after rank 2 was killed).
  std::string Explain(const char* what, const std::string& error) const {
    const std::string dead = ExitedPeers();
    if (!dead.empty()) {
      return "gloo: " + dead + " died during " + what + ": " + error;
    }
    const bool timed_out = error.find("imed out") != std::string::npos;
    std::string peers;
    for (int r = 0; r < world_; ++r) {
      if (r != rank_)
        peers += (peers.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    return "gloo: " +
           (timed_out ? "timed out after " + SecondsText(timeout_) + " "
                      : std::string()) +
           "in " + what + " waiting for " + peers + ": " + error;
  }

  const int rank_, world_;
  const milliseconds timeout_;
  const PeerWatch watch_;
  std::shared_ptr<gloo::Context> gloo_;
  uint64_t tags_ = 0;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = "gloo";
  d.summary =
      "Gloo's collectives over TCP (Debian's libgloo), the library behind "
      "PyTorch's CPU process group";
  d.memory = MemoryKind::kHost;
  d.spans_hosts = true;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  // 16-bit sums rounded after every hop of gloo's ring (as gloo's own
  // float16 sum), the average divided once more at the end.
  d.types = AllDataTypes();
  d.checks_calls = false;  // Gloo hangs or mixes buffers on a mismatch
  d.conformance.join_deadlines_to_notice_death = 6;
  d.conformance.op_deadlines_to_notice_death = 1;
  d.create = FactoryOf<GlooBackend>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm
