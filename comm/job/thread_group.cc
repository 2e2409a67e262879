#include "comm/job/thread_group.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "comm/communicator.h"
#include "comm/poll_pacer.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::string RankList(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return text;
}

uint64_t ProcessNonce() {
  static const uint64_t nonce = [] {
    std::random_device device;
    return (uint64_t{device()} << 32) ^ device();
  }();
  return nonce;
}

// Groups by the token rank 0 drew: communicators of different jobs in one
// process (tests run several) never meet, even under equal prefixes.
std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, std::weak_ptr<ThreadGroup>>& Registry() {
  static auto* registry = new std::map<std::string, std::weak_ptr<ThreadGroup>>;
  return *registry;
}

}  // namespace

ThreadGroup::ThreadGroup(int world_size, std::string backend)
    : world_size_(world_size),
      backend_(std::move(backend)),
      arrived_(new std::atomic<uint64_t>[world_size]),
      left_(new std::atomic<bool>[world_size]),
      joined_(world_size, false),
      values_(world_size),
      calls_(world_size) {
  for (int r = 0; r < world_size; ++r) {
    arrived_[r].store(0);
    left_[r].store(false);
  }
}

std::shared_ptr<ThreadGroup> ThreadGroup::Join(
    const RankContext& context, std::chrono::milliseconds timeout,
    const std::string& backend) {
  Store* const store = context.store;
  const int rank = context.rank, world_size = context.world_size;
  if (store == nullptr) {
    throw std::invalid_argument(backend + ": ranks as threads need a store");
  }
  if (world_size < 1 || rank < 0 || rank >= world_size ||
      context.peers.size() != static_cast<size_t>(world_size)) {
    throw std::invalid_argument(
        backend + ": rank " + std::to_string(rank) + " not in [0, world_size=" +
        std::to_string(world_size) + ") or no peer information for every rank");
  }
  // Which process each rank is in was gathered when the job started: ranks
  // in other processes can never appear in this one's group.
  const PeerInfo& me = context.peers[rank];
  for (int q = 0; q < world_size; ++q) {
    const PeerInfo& theirs = context.peers[q];
    if (theirs.SameProcess(me)) continue;
    throw CommError(backend + ": ranks " + std::to_string(rank) + " and " +
                    std::to_string(q) + " are in different processes (pid " +
                    std::to_string(me.pid) + " on " + me.host + "; pid " +
                    std::to_string(theirs.pid) + " on " + theirs.host +
                    "): ranks as threads must all be threads of one process "
                    "(for one process per rank, use ipc_ring)");
  }
  // Claimed through the store, so that two threads given one rank are told
  // so whichever order they come in.
  if (store->Add("claim/" + std::to_string(rank), 1) != 1) {
    throw CommError(backend + ": rank " + std::to_string(rank) +
                    " joined twice (two threads given one rank)");
  }
  if (rank == 0) {
    std::random_device device;
    store->Set("token", std::to_string(ProcessNonce()) + " " +
                            std::to_string(device()) + " " +
                            std::to_string(device()));
  }
  store->Set("joined/" + std::to_string(rank), "1");
  try {
    store->Wait(RankKeys("joined", world_size), timeout);
  } catch (const StoreTimeout&) {
    std::vector<int> absent;
    for (int q = 0; q < world_size; ++q) {
      if (!store->Check({"joined/" + std::to_string(q)})) absent.push_back(q);
    }
    throw CommError(backend + ": " + RankList(absent) +
                    " did not join within " + SecondsText(timeout) + " (rank " +
                    std::to_string(rank) + " waiting)");
  }
  const std::string token = store->Get("token", std::chrono::milliseconds(0));

  std::shared_ptr<ThreadGroup> group;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto& registry = Registry();
    for (auto it = registry.begin(); it != registry.end();) {
      it = it->second.expired() ? registry.erase(it) : std::next(it);
    }
    std::weak_ptr<ThreadGroup>& slot = registry[token];
    group = slot.lock();
    if (!group) {
      group.reset(new ThreadGroup(world_size, backend));
      slot = group;
    }
  }
  if (group->world_size_ != world_size) {
    throw CommError(backend + ": rank " + std::to_string(rank) +
                    " has world size " + std::to_string(world_size) +
                    ", a rank before it " + std::to_string(group->world_size_));
  }
  std::lock_guard<std::mutex> lock(group->mutex_);
  if (group->joined_[rank]) {
    throw CommError(backend + ": rank " + std::to_string(rank) +
                    " joined twice (two threads with one rank)");
  }
  group->joined_[rank] = true;
  return group;
}

void ThreadGroup::CheckRank(int rank, const char* what) const {
  if (rank < 0 || rank >= world_size_) {
    throw std::invalid_argument(backend_ + ": " + what + " by rank " +
                                std::to_string(rank) + ", not in [0, " +
                                std::to_string(world_size_) + ")");
  }
}

std::string ThreadGroup::Error(const std::string& text) const {
  return backend_ + ": " + text;
}

std::vector<std::string> ThreadGroup::Exchange(
    int rank, const std::string& mine, std::chrono::milliseconds timeout) {
  CheckRank(rank, "Exchange");
  std::unique_lock<std::mutex> lock(mutex_);
  values_[rank] = mine;
  changed_.notify_all();
  const auto deadline = Clock::now() + timeout;
  auto missing = [&] {
    std::vector<int> ranks;
    for (int q = 0; q < world_size_; ++q) {
      if (!values_[q]) ranks.push_back(q);
    }
    return ranks;
  };
  changed_.wait_until(lock, deadline, [&] {
    return missing().empty() || FirstGone(rank) >= 0;
  });
  const int gone = FirstGone(rank);
  const std::vector<int> absent = missing();
  if (!absent.empty() && gone >= 0) {
    throw CommError(Error("rank " + std::to_string(gone) + " left while rank " +
                          std::to_string(rank) +
                          " waited for every rank's buffers"));
  }
  if (!absent.empty()) {
    throw CommError(Error("timed out after " + SecondsText(timeout) +
                          " waiting for " + RankList(absent) +
                          " to publish their buffers (rank " +
                          std::to_string(rank) + ")"));
  }
  std::vector<std::string> all;
  for (const auto& v : values_) all.push_back(*v);
  return all;
}

void ThreadGroup::Arrive(int rank, const std::string& what,
                         const std::string& call,
                         std::chrono::milliseconds timeout) {
  CheckRank(rank, "Arrive");
  const uint64_t mine = arrived_[rank].load(std::memory_order_relaxed) + 1;
  if (!call.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_[rank][mine & 1] = call;
  }
  arrived_[rank].store(mine, std::memory_order_release);
  const auto deadline = Clock::now() + timeout;
  PollPacer pacer;
  for (int q = 0; q < world_size_; ++q) {
    while (arrived_[q].load(std::memory_order_acquire) < mine) {
      if (left_[q].load(std::memory_order_acquire)) {
        // q may have arrived and left since the load above: its arrival is
        // stored before its leaving, so it is visible now.
        if (arrived_[q].load(std::memory_order_acquire) >= mine) break;
        throw CommError(Error("rank " + std::to_string(q) +
                              " left (its communicator was destroyed) while "
                              "rank " +
                              std::to_string(rank) + " waited in " + what));
      }
      if (Clock::now() > deadline) {
        std::vector<int> absent;
        for (int p = 0; p < world_size_; ++p) {
          if (arrived_[p].load(std::memory_order_acquire) < mine) {
            absent.push_back(p);
          }
        }
        throw CommError(Error("timed out after " + SecondsText(timeout) +
                              " waiting for " + RankList(absent) + " in " +
                              what + " (rank " + std::to_string(rank) + ")"));
      }
      pacer.Pause();
    }
  }
  if (call.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int q = 0; q < world_size_; ++q) {
    const std::string& theirs = calls_[q][mine & 1];
    if (theirs != call) {
      throw CommError(Error(
          "mismatched collectives: rank " + std::to_string(rank) + " is in " +
          call + " but rank " + std::to_string(q) + " is in " + theirs));
    }
  }
}

void ThreadGroup::Leave(int rank) {
  CheckRank(rank, "Leave");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left_[rank].store(true, std::memory_order_release);
  }
  changed_.notify_all();
}

int ThreadGroup::FirstGone(int except) const {
  for (int q = 0; q < world_size_; ++q) {
    if (q != except && left_[q].load(std::memory_order_acquire)) return q;
  }
  return -1;
}

bool ThreadGroup::WaitForPeersToLeave(int rank,
                                      std::chrono::milliseconds timeout) {
  CheckRank(rank, "WaitForPeersToLeave");
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] {
    for (int q = 0; q < world_size_; ++q) {
      if (q != rank && !left_[q].load(std::memory_order_acquire)) return false;
    }
    return true;
  });
}

}  // namespace ringlab::comm
