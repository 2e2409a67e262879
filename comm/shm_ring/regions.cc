#include "comm/shm_ring/regions.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "comm/communicator.h"
#include "comm/process.h"

namespace ringlab::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = 4096;
constexpr uint64_t kRegionMagic = 0x72696e676c616252ull;  // "ringlabR"

struct RegionHeader {
  std::atomic<uint64_t> magic;
  uint64_t nonce;
  uint64_t count;
  uint64_t world_size;
};

size_t SlotBytes(size_t count) {
  return std::max(kPage, (count * sizeof(float) + kPage - 1) / kPage * kPage);
}

std::string Errno(const std::string& what) {
  return "shm_ring: " + what + ": " + std::strerror(errno);
}

}  // namespace

ShmRegions::ShmRegions(Store* store, std::string prefix, int rank,
                       int world_size, std::vector<int> pids,
                       std::chrono::milliseconds timeout)
    : store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      world_(world_size),
      pids_(std::move(pids)),
      timeout_(timeout) {}

ShmRegions::~ShmRegions() {
  for (const Region& r : regions_) munmap(r.base, r.map_bytes);
}

int ShmRegions::CreateFile(size_t bytes) const {
  const int fd = memfd_create("ringlab-shm_ring-region", MFD_CLOEXEC);
  if (fd < 0) throw CommError(Errno("memfd_create failed"));
  const int err = fchmod(fd, 0600) != 0 ? errno : posix_fallocate(fd, 0, bytes);
  if (err != 0) {
    close(fd);
    throw CommError(
        "shm_ring: cannot reserve " + std::to_string(bytes >> 20) +
        " MiB of shared memory for registered buffers: " + std::strerror(err));
  }
  return fd;
}

// A peer that died, or one that reported an error, ends a wait at once.
void ShmRegions::CheckPeersAlive(const std::string& key) const {
  std::string error;
  try {
    error = store_->Get(key + "error", std::chrono::milliseconds(0));
  } catch (const CommError&) {
  }
  if (!error.empty()) throw CommError(error);
  for (int r = 0; r < world_; ++r) {
    if (r != rank_ && r < static_cast<int>(pids_.size()) &&
        ProcessExited(pids_[r])) {
      throw CommError("shm_ring: rank " + std::to_string(r) + " (pid " +
                      std::to_string(pids_[r]) + ") died during Allocate");
    }
  }
}

void ShmRegions::WaitForPeersToMap(const std::string& key) const {
  const auto deadline = Clock::now() + timeout_;
  auto pause = std::chrono::microseconds(50);
  while (store_->Add(key + "mapped", 0) < world_ - 1) {
    CheckPeersAlive(key);
    if (Clock::now() > deadline) {
      throw CommError(
          "shm_ring: timed out waiting for the peers to map a "
          "registered region");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

ShmRegions::Region ShmRegions::MapPeerFile(const std::string& address,
                                           size_t count) const {
  long long pid = 0, fd = 0;
  unsigned long long nonce = 0;
  if (std::sscanf(address.c_str(), "memfd:%lld:%lld:%llu", &pid, &fd, &nonce) !=
      3) {
    throw CommError("shm_ring: bad region address '" + address + "'");
  }
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (file < 0) throw CommError(Errno("cannot open rank 0's region " + path));
  struct stat st;
  Region region;
  if (fstat(file, &st) == 0 && st.st_size >= static_cast<off_t>(kPage)) {
    region.map_bytes = static_cast<size_t>(st.st_size);
    void* p = mmap(nullptr, region.map_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, file, 0);
    region.base = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  close(file);
  if (region.base == nullptr) throw CommError(Errno("cannot map " + path));
  const auto* h = reinterpret_cast<const RegionHeader*>(region.base);
  std::string error;
  if (h->magic.load(std::memory_order_acquire) != kRegionMagic ||
      h->nonce != nonce) {
    error = "shm_ring: " + path + " is not rank 0's registered region";
  } else if (h->count != count ||
             h->world_size != static_cast<uint64_t>(world_)) {
    error = "shm_ring: mismatched Allocate: rank 0 allocated count=" +
            std::to_string(h->count) + ", rank " + std::to_string(rank_) +
            " count=" + std::to_string(count);
  }
  region.slot_bytes = SlotBytes(count);
  if (error.empty() && region.map_bytes != kPage + world_ * region.slot_bytes) {
    error = "shm_ring: registered region " + path + " has the wrong size";
  }
  if (!error.empty()) {
    munmap(region.base, region.map_bytes);
    throw CommError(error);
  }
  return region;
}

float* ShmRegions::Allocate(size_t count) {
  const std::string key =
      prefix_ + "region/" + std::to_string(regions_.size()) + "/";
  Region region;
  try {
    if (rank_ == 0) {
      uint64_t nonce = 0;
      if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
        nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
      }
      region.slot_bytes = SlotBytes(count);
      region.map_bytes = kPage + world_ * region.slot_bytes;
      const int fd = CreateFile(region.map_bytes);
      void* p = mmap(nullptr, region.map_bytes, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        close(fd);
        throw CommError(Errno("cannot map a registered region"));
      }
      region.base = static_cast<char*>(p);
      auto* h = reinterpret_cast<RegionHeader*>(region.base);
      h->nonce = nonce;
      h->count = count;
      h->world_size = static_cast<uint64_t>(world_);
      h->magic.store(kRegionMagic, std::memory_order_release);
      store_->Set(key + "name", "memfd:" + std::to_string(getpid()) + ":" +
                                    std::to_string(fd) + ":" +
                                    std::to_string(nonce));
      try {
        WaitForPeersToMap(key);
      } catch (...) {
        close(fd);
        munmap(region.base, region.map_bytes);
        throw;
      }
      close(fd);  // every peer holds its own mapping now
      store_->Set(key + "ready", "ok");
    } else {
      const auto deadline = Clock::now() + timeout_;
      std::string address;
      for (;;) {
        try {
          address = store_->Get(key + "name", std::chrono::milliseconds(1));
          break;
        } catch (const CommError&) {
        }
        CheckPeersAlive(key);
        if (Clock::now() > deadline) {
          throw CommError(
              "shm_ring: timed out waiting for rank 0's "
              "registered region");
        }
      }
      region = MapPeerFile(address, count);
      store_->Add(key + "mapped", 1);
      // Rank 0 says when every rank holds it: only then is it everyone's.
      for (;;) {
        try {
          store_->Get(key + "ready", std::chrono::milliseconds(1));
          break;
        } catch (const CommError&) {
        }
        try {
          CheckPeersAlive(key);
        } catch (...) {
          munmap(region.base, region.map_bytes);
          throw;
        }
        if (Clock::now() > deadline) {
          munmap(region.base, region.map_bytes);
          throw CommError(
              "shm_ring: timed out waiting for the peers to map "
              "a registered region");
        }
      }
    }
  } catch (const CommError& e) {
    try {
      store_->Set(key + "error", e.what());
    } catch (...) {
    }
    throw;
  }
  regions_.push_back(region);
  return reinterpret_cast<float*>(region.base + kPage +
                                  rank_ * region.slot_bytes);
}

bool ShmRegions::Find(const float* data, size_t count,
                      std::vector<float*>* peers) const {
  const char* p = reinterpret_cast<const char*>(data);
  for (const Region& r : regions_) {
    const char* mine = r.base + kPage + rank_ * r.slot_bytes;
    if (p < mine || p + count * sizeof(float) > mine + r.slot_bytes) continue;
    const size_t offset = static_cast<size_t>(p - mine);
    peers->resize(world_);
    for (int q = 0; q < world_; ++q) {
      (*peers)[q] =
          reinterpret_cast<float*>(r.base + kPage + q * r.slot_bytes + offset);
    }
    return true;
  }
  return false;
}

}  // namespace ringlab::comm
