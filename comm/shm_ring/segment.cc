#include "comm/shm_ring/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "comm/store/job_secret.h"

namespace ringlab::comm::shm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kSegmentMagic = 0x72696e676c616232ull;  // "ringlab2"
constexpr size_t kPage = 4096;

Mapping Map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    throw CommError(std::string("shm_ring: mmap failed: ") +
                    std::strerror(errno));
  }
  return {static_cast<char*>(p), bytes};
}

uint64_t Nonce() {
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
    nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  return nonce;
}

}  // namespace

SegmentJoin::SegmentJoin(Store& store, const RankContext& context,
                         std::chrono::milliseconds timeout, std::string what)
    : store_(store),
      context_(context),
      timeout_(timeout),
      deadline_(Clock::now() + timeout),
      what_(std::move(what)),
      watch_(context.peers, context.rank) {}

SegmentJoin::~SegmentJoin() {
  if (fd_ >= 0) close(fd_);
}

std::string SegmentJoin::Tag(uint64_t nonce) const {
  std::string tag(sizeof(SegmentHeader::tag), '\0');
  if (!context_.job_secret.empty()) {
    const std::string mac = JobTag(context_.job_secret,
                                   "shm_ring segment " + std::to_string(nonce));
    tag.replace(0, tag.size(), mac, 0, tag.size());
  }
  return tag;
}

void SegmentJoin::Report(const std::string& message) {
  if (reported_) return;
  reported_ = true;
  try {
    store_.Set("error",
               "rank " + std::to_string(context_.rank) + ": " + message);
  } catch (...) {
    // The store itself failed: peers will time out; nothing better to do.
  }
}

// A rank that failed says why before it exits: that, not its exit, is what
// went wrong; a rank that died without a word is named as dead.
void SegmentJoin::CheckPeers() {
  auto reported = [&]() -> std::string {
    try {
      return store_.Get("error", std::chrono::milliseconds(0));
    } catch (const StoreTimeout&) {
      return "";
    }
  };
  std::string failure = reported();
  const int dead = failure.empty() ? watch_.FirstDeadPeer() : -1;
  if (dead >= 0) {
    failure = reported();  // it may have said why just before it exited
    if (failure.empty()) {
      throw CommError("shm_ring: rank " + std::to_string(dead) + " (pid " +
                      std::to_string(watch_.pid(dead)) +
                      ") died while the ranks were joining (" + what_ + ")");
    }
  }
  if (failure.empty()) return;
  reported_ = true;  // it is that rank's failure, already in the store
  throw CommError("shm_ring: a rank failed to join: " + failure);
}

void SegmentJoin::Wait(const std::vector<std::string>& keys,
                       const std::string& doing) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline_ - Clock::now());
  try {
    WaitWatching(store_, keys, std::max(left, std::chrono::milliseconds(0)),
                 [&] { CheckPeers(); });
  } catch (const StoreTimeout&) {
    CheckPeers();
    std::string missing;
    for (const std::string& key : keys) {
      const size_t slash = key.rfind('/');
      if (slash == std::string::npos || store_.Check({key})) continue;
      missing += (missing.empty() ? "; not done by rank " : ", rank ") +
                 key.substr(slash + 1);
    }
    throw CommError("shm_ring: timed out after " + SecondsText(timeout_) +
                    " waiting for " + doing + missing);
  }
}

void SegmentJoin::WaitForRanks(const std::string& name,
                               const std::string& doing) {
  std::vector<std::string> keys;
  for (int r = 0; r < context_.world_size; ++r) {
    if (r != context_.rank) keys.push_back(name + "/" + std::to_string(r));
  }
  Wait(keys, doing);
}

Mapping SegmentJoin::Create(size_t bytes,
                            const std::function<void(char*)>& fill) {
  bytes = std::max(bytes, kPage);
  fd_ = memfd_create("ringlab-shm_ring", MFD_CLOEXEC);
  if (fd_ < 0) {
    throw CommError(std::string("shm_ring: memfd_create failed: ") +
                    std::strerror(errno));
  }
  // Owner only (memfds start 0777): reaching /proc/<pid>/fd already needs
  // this user's rights, and the file says so too. ftruncate reserves
  // nothing (on a full tmpfs the first touch of a page would be a SIGBUS):
  // reserve it all now and fail cleanly.
  const int err = fchmod(fd_, 0600) != 0
                      ? errno
                      : posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    throw CommError(
        "shm_ring: cannot reserve " + std::to_string(bytes >> 20) +
        " MiB of shared memory for " + what_ + " of " +
        std::to_string(context_.world_size) + " ranks: " + std::strerror(err) +
        (err == ENOSPC || err == ENOMEM
             ? " (too little free memory; a smaller shm_ring.chunk_bytes, "
               "RINGLAB_SHM_CHUNK_BYTES, shrinks the ring's segment)"
             : ""));
  }
  const Mapping mapping = Map(fd_, bytes);
  const uint64_t nonce = Nonce();
  auto* header = reinterpret_cast<SegmentHeader*>(mapping.base);
  header->nonce = nonce;
  header->world_size = static_cast<uint64_t>(context_.world_size);
  const std::string tag = Tag(nonce);
  std::memcpy(header->tag, tag.data(), sizeof(header->tag));
  fill(mapping.base);
  header->magic.store(kSegmentMagic, std::memory_order_release);
  store_.Set("segment", "memfd:" + std::to_string(getpid()) + ":" +
                            std::to_string(fd_) + ":" + std::to_string(nonce));
  return mapping;
}

Mapping SegmentJoin::Open(
    const std::function<void(const char*, size_t)>& check) {
  Wait({"segment"}, "rank 0 to publish " + what_);
  long long pid = 0, fd = 0;
  unsigned long long nonce = 0;
  const std::string where = store_.Get("segment", std::chrono::milliseconds(0));
  if (std::sscanf(where.c_str(), "memfd:%lld:%lld:%llu", &pid, &fd, &nonce) !=
      3) {
    throw CommError("shm_ring: bad address '" + where + "' of " + what_);
  }
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (file < 0) {
    const int err = errno;
    CheckPeers();  // rank 0 let the file go because some rank failed
    throw CommError("shm_ring: rank " + std::to_string(context_.rank) +
                    " cannot open rank 0's " + what_ + " at " + path + ": " +
                    std::strerror(err) +
                    " (rank 0 gone, or not the same user, machine and PID "
                    "namespace)");
  }
  struct stat st;
  Mapping mapping;
  try {
    if (fstat(file, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
      throw CommError("shm_ring: " + what_ + " at " + path + " is too small");
    }
    mapping = Map(file, static_cast<size_t>(st.st_size));
  } catch (...) {
    close(file);
    throw;
  }
  close(file);
  const auto* header = reinterpret_cast<const SegmentHeader*>(mapping.base);
  try {
    if (header->magic.load(std::memory_order_acquire) != kSegmentMagic ||
        header->nonce != nonce ||
        !ConstantTimeEqual(
            std::string(reinterpret_cast<const char*>(header->tag),
                        sizeof(header->tag)),
            Tag(nonce))) {
      throw CommError("shm_ring: " + path + " is not this job's segment");
    }
    if (header->world_size != static_cast<uint64_t>(context_.world_size)) {
      throw CommError("shm_ring: rank " + std::to_string(context_.rank) +
                      " has world_size " + std::to_string(context_.world_size) +
                      " but rank 0 has " + std::to_string(header->world_size));
    }
    check(mapping.base, mapping.bytes);
  } catch (...) {
    munmap(mapping.base, mapping.bytes);
    throw;
  }
  store_.Set("mapped/" + std::to_string(context_.rank), "1");
  return mapping;
}

std::string SegmentJoin::Finish(const std::function<std::string()>& ready) {
  if (context_.rank != 0) {
    Wait({"ready"}, "the other ranks to map " + what_);
    return store_.Get("ready", std::chrono::milliseconds(0));
  }
  WaitForRanks("mapped", "the peers to map " + what_);
  close(fd_);  // every peer holds its own mapping now
  fd_ = -1;
  const std::string value = ready();
  store_.Set("ready", value);
  return value;
}

}  // namespace ringlab::comm::shm
