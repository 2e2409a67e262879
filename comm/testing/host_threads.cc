// "host_threads": a test-only communicator whose ranks are threads of one
// process over host memory, the CPU twin of ipc_ring_threads. It meets its
// peers, exchanges its staging buffer's address and lines up before every
// step through the very ThreadGroup ipc_ring_threads uses, so that the
// threads-mode machinery (ThreadGroup, RunRankThreads, RunThreadRanks and the
// conformance suite's threads driver) is exercised where no GPU exists.
// Algorithm: each rank copies its input into its staging buffer, all line
// up (checking that they are in the same call), every rank sums all staging
// buffers in rank order (so results are bitwise equal on every rank; an
// allgather copies them instead), and all line up again before a staging
// buffer is reused. Registered when
// //comm/testing:host_threads is linked.
#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/backend.h"
#include "comm/job/thread_group.h"

namespace ringlab::comm::testing {
namespace {

constexpr char kName[] = "host_threads";
// Small enough that the suite's 16 MiB case goes through in pieces.
constexpr size_t kStagingFloats = size_t{1} << 20;

template <typename T>
T Reduce(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kMin:
      return std::min(a, b);
    default:
      return a + b;
  }
}

class HostThreads final : public Backend {
 public:
  HostThreads(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout) {
    if (world_size_ == 1) return;
    group_ = ThreadGroup::Join(context, options.join_timeout, kName);
    staging_ = new float[kStagingFloats];
    std::ostringstream mine;
    mine << reinterpret_cast<uintptr_t>(staging_);
    try {
      for (const std::string& text :
           group_->Exchange(rank_, mine.str(), options.join_timeout)) {
        uintptr_t address = 0;
        std::istringstream(text) >> address;
        peers_.push_back(reinterpret_cast<const float*>(address));
      }
    } catch (...) {
      Release();
      throw;
    }
  }
  ~HostThreads() override { Release(); }

  void AllReduce(void* buffer, size_t count, DataType, ReduceOp op) override {
    float* const data = static_cast<float*>(buffer);
    const std::string call = "AllReduce(count=" + std::to_string(count) +
                             ", op=" + ReduceOpName(op) + ")";
    if (count == 0) LineUp("AllReduce", call);
    for (size_t at = 0; at < count; at += kStagingFloats) {
      const size_t n = std::min(kStagingFloats, count - at);
      std::copy(data + at, data + at + n, staging_);
      LineUp("AllReduce", call);
      for (size_t i = 0; i < n; ++i) {
        float acc = peers_[0][i];
        for (int q = 1; q < world_size_; ++q)
          acc = Reduce(acc, peers_[q][i], op);
        data[at + i] = op == ReduceOp::kAvg ? acc / world_size_ : acc;
      }
      LineUp("AllReduce", call + " (done reading)");
    }
  }

  void Broadcast(void* buffer, size_t count, DataType, int root) override {
    float* const data = static_cast<float*>(buffer);
    const std::string call = "Broadcast(count=" + std::to_string(count) +
                             ", root=" + std::to_string(root) + ")";
    if (count == 0) LineUp("Broadcast", call);
    for (size_t at = 0; at < count; at += kStagingFloats) {
      const size_t n = std::min(kStagingFloats, count - at);
      if (rank_ == root) std::copy(data + at, data + at + n, staging_);
      LineUp("Broadcast", call);
      if (rank_ != root) std::copy(peers_[root], peers_[root] + n, data + at);
      LineUp("Broadcast", call + " (done reading)");
    }
  }

  // Each piece: every rank posts its part of its block in its staging
  // buffer, all line up, every rank copies every peer's.
  void AllGather(const void* send_buffer, void* recv_buffer, size_t count,
                 DataType) override {
    const float* const send = static_cast<const float*>(send_buffer);
    float* const recv = static_cast<float*>(recv_buffer);
    float* own = recv + static_cast<size_t>(rank_) * count;
    if (count > 0 && send != own) std::copy(send, send + count, own);
    if (world_size_ == 1) return;
    const std::string call = "AllGather(count=" + std::to_string(count) + ")";
    if (count == 0) LineUp("AllGather", call);
    for (size_t at = 0; at < count; at += kStagingFloats) {
      const size_t n = std::min(kStagingFloats, count - at);
      std::copy(own + at, own + at + n, staging_);
      LineUp("AllGather", call);
      for (int q = 0; q < world_size_; ++q) {
        if (q == rank_) continue;
        std::copy(peers_[q], peers_[q] + n,
                  recv + static_cast<size_t>(q) * count + at);
      }
      LineUp("AllGather", call + " (done reading)");
    }
  }

  void Barrier() override { LineUp("Barrier", "Barrier"); }

 private:
  void LineUp(const char* what, const std::string& call) {
    group_->Arrive(rank_, what, call, timeout_);
  }

  void Release() noexcept {
    if (!group_) return;
    group_->Leave(rank_);
    // Peers read this staging buffer until they leave: leak it otherwise.
    if (group_->WaitForPeersToLeave(rank_, timeout_)) delete[] staging_;
    staging_ = nullptr;
    group_.reset();
  }

  const int rank_;
  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<ThreadGroup> group_;
  float* staging_ = nullptr;
  std::vector<const float*> peers_;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = kName;
  d.summary = "test only: ranks as threads over host memory";
  d.memory = MemoryKind::kHost;
  d.launch = RankLaunch::kThreads;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  d.checks_calls = true;  // every line-up compares the ranks' calls
  d.create = FactoryOf<HostThreads>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm::testing
