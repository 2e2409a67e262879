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
#include "comm/dtype/kernels.h"
#include "comm/job/thread_group.h"

namespace ringlab::comm::testing {
namespace {

constexpr char kName[] = "host_threads";
// Small enough that the suite's 16 MiB case goes through in pieces.
constexpr size_t kStagingBytes = size_t{4} << 20;

class HostThreads final : public Backend {
 public:
  HostThreads(const RankContext& context, const CommOptions& options)
      : rank_(context.rank),
        world_size_(context.world_size),
        timeout_(options.timeout) {
    if (world_size_ == 1) return;
    group_ = ThreadGroup::Join(context, options.join_timeout, kName);
    staging_ = new char[kStagingBytes];
    std::ostringstream mine;
    mine << reinterpret_cast<uintptr_t>(staging_);
    try {
      for (const std::string& text :
           group_->Exchange(rank_, mine.str(), options.join_timeout)) {
        uintptr_t address = 0;
        std::istringstream(text) >> address;
        peers_.push_back(reinterpret_cast<const char*>(address));
      }
    } catch (...) {
      Release();
      throw;
    }
  }
  ~HostThreads() override { Release(); }

  // Sums (and averages) are comm/dtype's sum_into over the staging buffers
  // in rank order (16-bit types: in float32, rounded once); max and min
  // comm/dtype's too, in rank order.
  void AllReduce(void* buffer, size_t count, DataType type,
                 ReduceOp op) override {
    char* const data = static_cast<char*>(buffer);
    const dtype::ElementKernels& k = dtype::KernelsFor(type);
    const std::string call = "AllReduce(count=" + std::to_string(count) +
                             ", dtype=" + DataTypeName(type) +
                             ", op=" + ReduceOpName(op) + ")";
    if (count == 0) LineUp("AllReduce", call);
    const size_t piece = kStagingBytes / k.size;
    std::vector<const void*> sources(world_size_);
    for (size_t at = 0; at < count; at += piece) {
      const size_t n = std::min(piece, count - at);
      char* const x = data + at * k.size;
      std::memcpy(staging_, x, n * k.size);
      LineUp("AllReduce", call);
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
        for (int q = 0; q < world_size_; ++q) sources[q] = peers_[q];
        void* const dst = x;
        k.sum_into(sources.data(), sources.size(), &dst, 1, n,
                   op == ReduceOp::kAvg ? static_cast<float>(world_size_) : 0);
      } else {
        const auto extreme = op == ReduceOp::kMax ? k.maximum : k.minimum;
        std::memcpy(x, peers_[0], n * k.size);
        for (int q = 1; q < world_size_; ++q) extreme(x, x, peers_[q], n);
      }
      LineUp("AllReduce", call + " (done reading)");
    }
  }

  void Broadcast(void* buffer, size_t count, DataType type, int root) override {
    char* const data = static_cast<char*>(buffer);
    const size_t size = DataTypeSize(type);
    const std::string call = "Broadcast(count=" + std::to_string(count) +
                             ", dtype=" + DataTypeName(type) +
                             ", root=" + std::to_string(root) + ")";
    if (count == 0) LineUp("Broadcast", call);
    const size_t bytes = count * size;
    for (size_t at = 0; at < bytes; at += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, bytes - at);
      if (rank_ == root) std::memcpy(staging_, data + at, n);
      LineUp("Broadcast", call);
      if (rank_ != root) std::memcpy(data + at, peers_[root], n);
      LineUp("Broadcast", call + " (done reading)");
    }
  }

  // Each piece: every rank posts its part of its block in its staging
  // buffer, all line up, every rank copies every peer's.
  void AllGather(const void* send_buffer, void* recv_buffer, size_t count,
                 DataType type) override {
    const size_t block = count * DataTypeSize(type);
    const char* const send = static_cast<const char*>(send_buffer);
    char* const recv = static_cast<char*>(recv_buffer);
    char* own = recv + static_cast<size_t>(rank_) * block;
    if (block > 0 && send != own) std::memcpy(own, send, block);
    if (world_size_ == 1) return;
    const std::string call = "AllGather(count=" + std::to_string(count) +
                             ", dtype=" + DataTypeName(type) + ")";
    if (count == 0) LineUp("AllGather", call);
    for (size_t at = 0; at < block; at += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, block - at);
      std::memcpy(staging_, own + at, n);
      LineUp("AllGather", call);
      for (int q = 0; q < world_size_; ++q) {
        if (q == rank_) continue;
        std::memcpy(recv + static_cast<size_t>(q) * block + at, peers_[q], n);
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
  char* staging_ = nullptr;
  std::vector<const char*> peers_;
};

BackendDescription Description() {
  BackendDescription d;
  d.name = kName;
  d.summary = "test only: ranks as threads over host memory";
  d.memory = MemoryKind::kHost;
  d.launch = RankLaunch::kThreads;
  d.ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
  d.types = AllDataTypes();
  d.checks_calls = true;  // every line-up compares the ranks' calls
  d.create = FactoryOf<HostThreads>();
  return d;
}

const bool kRegistered = RegisterBackend(Description());

}  // namespace
}  // namespace ringlab::comm::testing
