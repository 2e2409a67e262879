#include "comm/peers.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "comm/process.h"
#include "comm/store/store.h"

namespace ringlab::comm {

std::string PeerInfo::Encode() const {
  return std::to_string(pid) + " " + std::to_string(start_time) + " " +
         (address.empty() ? "-" : address) + " " + host;
}

PeerInfo PeerInfo::Decode(const std::string& text) {
  std::istringstream in(text);
  PeerInfo peer;
  in >> peer.pid >> peer.start_time >> peer.address;
  std::getline(in >> std::ws, peer.host);
  if (peer.pid <= 0 || peer.host.empty() || peer.address.empty()) {
    throw std::invalid_argument("malformed peer information '" + text + "'");
  }
  if (peer.address == "-") peer.address.clear();
  return peer;
}

bool PeerExited(const PeerInfo& peer, const PeerInfo& self) {
  if (peer.pid <= 0 || !peer.SameHost(self)) return false;
  const pid_t pid = static_cast<pid_t>(peer.pid);
  if (ProcessExited(pid)) return true;
  // Alive, but is it still that process? 0: unreadable, gone meanwhile.
  const uint64_t started = ProcessStartTime(pid);
  return peer.start_time != 0 && started != 0 && started != peer.start_time;
}

std::vector<PeerInfo> ExchangePeers(Store& store, int rank, int world_size,
                                    const PeerInfo& mine,
                                    std::chrono::milliseconds timeout) {
  store.Set("peer/" + std::to_string(rank), mine.Encode());
  store.Wait(RankKeys("peer", world_size), timeout);
  std::vector<PeerInfo> peers(world_size);
  for (int r = 0; r < world_size; ++r) {
    const std::string key = "peer/" + std::to_string(r);
    try {
      peers[r] = PeerInfo::Decode(store.Get(key, std::chrono::milliseconds(0)));
    } catch (const std::invalid_argument& e) {
      throw StoreError(std::string(e.what()) + " under " + key);
    }
  }
  return peers;
}

std::vector<int> RanksOnHostOf(const std::vector<PeerInfo>& peers, int rank) {
  std::vector<int> ranks;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (peers[r].SameHost(peers.at(rank))) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::string DescribeHosts(const std::vector<PeerInfo>& peers, size_t* count) {
  // Hosts in order of their lowest rank, each with its ranks.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (size_t r = 0; r < peers.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& h) {
      return h.first == peers[r].host;
    });
    if (it == groups.end()) {
      groups.push_back({peers[r].host, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(static_cast<int>(r));
  }
  constexpr size_t kRanksNamed = 4;
  std::string where;
  for (const auto& [host, ranks] : groups) {
    where += where.empty() ? "" : "; ";
    where += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ranks.size() && i < kRanksNamed; ++i) {
      where += (i == 0 ? "" : ",") + std::to_string(ranks[i]);
    }
    if (ranks.size() > kRanksNamed) {
      where += " and " + std::to_string(ranks.size() - kRanksNamed) + " more";
    }
    where += " on " + host;
  }
  if (count != nullptr) *count = groups.size();
  return where;
}

PeerWatch::PeerWatch(const std::vector<PeerInfo>& peers, int rank)
    : local_(peers.size()) {
  if (rank >= 0 && static_cast<size_t>(rank) < peers.size()) {
    self_ = peers[rank];
  }
  for (size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) != rank && rank >= 0 &&
        static_cast<size_t>(rank) < peers.size() &&
        peers[r].SameHost(peers[rank]) && !peers[r].SameProcess(peers[rank])) {
      local_[r] = peers[r];
    }
  }
}

bool PeerWatch::Exited(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < local_.size() &&
         local_[rank].pid > 0 && PeerExited(local_[rank], self_);
}

int PeerWatch::DeadPeerWithin(std::chrono::milliseconds grace) const {
  const auto until = std::chrono::steady_clock::now() + grace;
  for (;;) {
    const int dead = FirstDeadPeer();
    if (dead >= 0 || std::chrono::steady_clock::now() >= until) return dead;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string PeerWatch::ExitedWithin(std::chrono::milliseconds grace) const {
  std::string text;
  const int dead = DeadPeerWithin(grace);
  if (dead < 0) return text;
  // The rank seen dead is named even where a second look at it answers
  // otherwise (its process reaped meanwhile): the message once read
  // "shm_ring:  died during ...", naming nobody.
  for (int r = 0; r < static_cast<int>(local_.size()); ++r) {
    if (r != dead && !Exited(r)) continue;
    text += (text.empty() ? "rank " : ", rank ") + std::to_string(r) +
            " (pid " + std::to_string(local_[r].pid) + ")";
  }
  return text;
}

int64_t PeerWatch::pid(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < local_.size()
             ? local_[rank].pid
             : 0;
}

int PeerWatch::FirstDeadPeer() const {
  for (size_t r = 0; r < local_.size(); ++r) {
    if (Exited(static_cast<int>(r))) return static_cast<int>(r);
  }
  return -1;
}

}  // namespace ringlab::comm
