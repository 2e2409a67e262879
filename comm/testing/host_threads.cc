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

#include "comm/call_agreement.h"
#include "comm/communicator.h"
#include "comm/job/thread_group.h"
#include "comm/store/store.h"

namespace ringlab::comm::testing {
namespace {

constexpr char kName[] = "host_threads";
// Small enough that the suite's 16 MiB case goes through in pieces.
constexpr size_t kStagingFloats = size_t{1} << 20;

class HostThreads : public Communicator {
 public:
  HostThreads(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout) {
    if (context.store == nullptr) {
      throw CommError("host_threads: needs a store");
    }
    if (world_size_ == 1) return;
    const int64_t k = context.store->Add(
        std::string(kName) + "/instances/" + std::to_string(rank_), 1);
    group_ = ThreadGroup::Join(context.store,
                               std::string(kName) + "/" + std::to_string(k),
                               rank_, world_size_, options.join_timeout, kName);
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

  const char* backend() const override { return kName; }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  uint64_t bytes_sent() const override { return bytes_sent_; }

  void AllReduce(float* data, size_t count, ReduceOp op) override {
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("host_threads: null data");
    }
    if (count == 0 || world_size_ == 1) return;
    const std::string call = "AllReduce(count=" + std::to_string(count) +
                             ", op=" + ReduceOpName(op) + ")";
    for (size_t at = 0; at < count; at += kStagingFloats) {
      const size_t n = std::min(kStagingFloats, count - at);
      std::copy(data + at, data + at + n, staging_);
      LineUp("AllReduce", call);
      for (size_t i = 0; i < n; ++i) {
        float sum = peers_[0][i];
        for (int q = 1; q < world_size_; ++q) sum += peers_[q][i];
        data[at + i] = op == ReduceOp::kAvg ? sum / world_size_ : sum;
      }
      LineUp("AllReduce", call + " (done reading)");
    }
    bytes_sent_ += AllReduceBusBytes(count, world_size_);
  }

  void Broadcast(float* data, size_t count, int root) override {
    if (root < 0 || root >= world_size_) {
      throw std::invalid_argument("host_threads: Broadcast root " +
                                  std::to_string(root) + " out of range");
    }
    if (data == nullptr && count > 0) {
      throw std::invalid_argument("host_threads: null data");
    }
    if (count == 0 || world_size_ == 1) return;
    const std::string call = "Broadcast(count=" + std::to_string(count) +
                             ", root=" + std::to_string(root) + ")";
    for (size_t at = 0; at < count; at += kStagingFloats) {
      const size_t n = std::min(kStagingFloats, count - at);
      if (rank_ == root) std::copy(data + at, data + at + n, staging_);
      LineUp("Broadcast", call);
      if (rank_ != root) std::copy(peers_[root], peers_[root] + n, data + at);
      LineUp("Broadcast", call + " (done reading)");
    }
    bytes_sent_ += BroadcastBusBytes(count, world_size_);
  }

  // Each piece: every rank posts its part of its block in its staging
  // buffer, all line up, every rank copies every peer's.
  void AllGather(const float* send, float* recv, size_t count) override {
    CheckAllGatherArguments(kName, send, recv, count, rank_, world_size_);
    float* own = recv + static_cast<size_t>(rank_) * count;
    if (count > 0 && send != own) std::copy(send, send + count, own);
    if (count == 0 || world_size_ == 1) return;
    const std::string call = "AllGather(count=" + std::to_string(count) + ")";
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
    bytes_sent_ += AllGatherBusBytes(count, world_size_);
  }

  void Barrier() override {
    if (world_size_ > 1) LineUp("Barrier", "Barrier");
  }

 private:
  void LineUp(const char* what, const std::string& call) {
    if (broken_) {
      throw CommError(std::string("host_threads: ") + what +
                      " after an earlier collective failed");
    }
    try {
      group_->Arrive(rank_, what, call, timeout_);
    } catch (...) {
      broken_ = true;
      throw;
    }
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
  bool broken_ = false;
  uint64_t bytes_sent_ = 0;
};

const bool kRegistered = RegisterCommunicator(
    kName, [](const RankContext& context, const CommOptions& options) {
      return std::make_unique<HostThreads>(context, options);
    });

}  // namespace
}  // namespace ringlab::comm::testing
