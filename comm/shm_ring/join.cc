// shm_ring's segment and join. Rank 0 creates the segment (an anonymous
// memfd, 0600, reserved up front) and publishes where peers open it
// (/proc/<pid>/fd/<fd>) with a random nonce that the segment's header must
// carry; peers map it and verify it before writing anything into it. Every
// rank publishes its pid first thing, and every wait of the join watches
// those pids, so a rank that dies while the ranks join is named at once; a
// rank that fails says why in the store ("error", and "state" goes
// negative), and the others fail naming it instead of at their deadline.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/process.h"
#include "comm/shm_ring/internal.h"
#include "comm/shm_ring/shm_ring.h"
#include "comm/store/job_secret.h"
#include "comm/store/store.h"

namespace ringlab::comm::shm {
namespace {

std::atomic<uint64_t> g_instances{0};

std::string CpusHex(const cpu_set_t& set) {
  std::string hex;
  const auto* b = reinterpret_cast<const unsigned char*>(&set);
  for (size_t i = 0; i < sizeof(set); ++i) {
    char h[3];
    std::snprintf(h, sizeof(h), "%02x", b[i]);
    hex += h;
  }
  return hex;
}

std::string Seconds(std::chrono::milliseconds t) {
  return std::to_string(std::chrono::duration<double>(t).count());
}

}  // namespace

// The state of one join: the store's keys under prefix, the deadline, what
// this rank has published or reported.
class ShmJoin {
 public:
  ShmJoin(ShmRing& ring, Store& store, std::string prefix,
          std::chrono::milliseconds timeout, std::string job_secret)
      : ring_(ring),
        store_(store),
        job_secret_(std::move(job_secret)),
        prefix_(std::move(prefix)),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        pids_(ring.world_, 0) {}

  void Announce();
  void CreateSegment();  // rank 0
  void OpenSegment();    // the others
  std::vector<int> AllPids();
  // After a failure: says why in the store, marks this rank aborted in the
  // segment (once verified), lets go of the file and the mapping.
  void Abandon(const std::string& message);

 private:
  std::string Key(const std::string& name) const { return prefix_ + name; }
  void Report(const std::string& message);
  std::string FailMessage();
  void ThrowIfARankFailed();
  void CheckPeers();
  std::string Unmapped() const;
  template <typename Ready, typename What>
  void WaitFor(const Ready& ready, const What& waiting_for);
  int CpusOfAllRanks();

  // The tag of the segment with this nonce, as the header holds it (all
  // zeros where the job has no secret).
  std::string SegmentTag(uint64_t nonce) const;

  ShmRing& ring_;
  Store& store_;
  const std::string job_secret_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  const Clock::time_point deadline_;
  std::vector<pid_t> pids_;  // 0 until the rank has published its pid
  int fd_ = -1;
  bool published_ = false;  // rank 0: the segment's address is in the store
  bool reported_ = false;   // a failure of ours (or a peer's) is in the store
  // Whether this rank's header may be written: only once the file is known
  // to be rank 0's segment (never into a foreign file).
  bool verified_ = false;
};

void ShmJoin::Report(const std::string& message) {
  if (reported_) return;
  reported_ = true;
  try {
    if (ring_.rank_ == 0 && !published_) {
      store_.Set(Key("name"), "error:" + message);
    }
    store_.Set(Key("error"),
               "rank " + std::to_string(ring_.rank_) + ": " + message);
    store_.Add(Key("state"), -(int64_t{1} << 40));
  } catch (...) {
    // The store itself failed: peers will time out; nothing better to do.
  }
}

std::string ShmJoin::FailMessage() {
  try {
    return store_.Get(Key("error"), std::chrono::seconds(5));
  } catch (const std::exception& e) {
    return std::string("(no message: ") + e.what() + ")";
  }
}

void ShmJoin::ThrowIfARankFailed() {
  if (store_.Add(Key("state"), 0) < 0) {
    reported_ = true;  // it is that rank's failure, already in the store
    throw CommError("shm_ring: a rank failed to join: " + FailMessage());
  }
}

// A rank that failed says why before it exits: that, not its exit, is what
// went wrong; a rank that died without a word is named as dead.
void ShmJoin::CheckPeers() {
  for (int p = 0; p < ring_.world_; ++p) {
    if (p == ring_.rank_) continue;
    if (pids_[p] == 0) {
      try {
        pids_[p] = static_cast<pid_t>(std::stol(store_.Get(
            Key("pid/" + std::to_string(p)), std::chrono::milliseconds(0))));
      } catch (const CommError&) {
        continue;  // not published yet
      }
    }
    if (ProcessExited(pids_[p])) {
      ThrowIfARankFailed();
      throw CommError("shm_ring: rank " + std::to_string(p) + " (pid " +
                      std::to_string(pids_[p]) +
                      ") died while the ranks were joining");
    }
  }
}

// The ranks that have not mapped the segment yet, for timeout messages (a
// rank stores its pid in its header once it has).
std::string ShmJoin::Unmapped() const {
  std::string ranks;
  for (int p = 0; p < ring_.world_; ++p) {
    if (ring_.Rank(p)->pid.load(std::memory_order_acquire) != 0) continue;
    ranks += (ranks.empty() ? "rank " : ", rank ") + std::to_string(p);
  }
  return ranks.empty() ? "" : "; not mapped by " + ranks;
}

// Polls ready() until it holds, checking the peers and the deadline.
template <typename Ready, typename What>
void ShmJoin::WaitFor(const Ready& ready, const What& waiting_for) {
  auto pause = std::chrono::microseconds(100);
  while (!ready()) {
    try {
      CheckPeers();
    } catch (const CommError&) {
      // A peer may finish its part and exit between ready() and the check:
      // done is done.
      if (ready()) return;
      throw;
    }
    if (Clock::now() > deadline_) {
      throw CommError("shm_ring: timed out after " + Seconds(timeout_) +
                      " s waiting for " + waiting_for());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

std::string ShmJoin::SegmentTag(uint64_t nonce) const {
  std::string tag(sizeof(GlobalHeader::tag), '\0');
  if (!job_secret_.empty()) {
    const std::string mac =
        JobTag(job_secret_, "shm_ring segment " + std::to_string(nonce));
    tag.replace(0, std::min(tag.size(), mac.size()), mac, 0,
                std::min(tag.size(), mac.size()));
  }
  return tag;
}

void ShmJoin::Announce() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) CPU_SET(0, &cpus);
  store_.Set(Key("cpus/" + std::to_string(ring_.rank_)), CpusHex(cpus));
  store_.Set(Key("pid/" + std::to_string(ring_.rank_)),
             std::to_string(getpid()));
}

// Oversubscribed when the ranks together may use fewer CPUs than there are
// ranks (the union of their masks: each rank pinned to its own CPU is not
// oversubscribed, all pinned to one CPU is).
int ShmJoin::CpusOfAllRanks() {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int p = 0; p < ring_.world_; ++p) {
    const std::string hex =
        store_.Get(Key("cpus/" + std::to_string(p)), std::chrono::seconds(5));
    auto* b = reinterpret_cast<unsigned char*>(&all);
    for (size_t i = 0; i < sizeof(all) && 2 * i + 1 < hex.size(); ++i) {
      b[i] |= static_cast<unsigned char>(
          std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    }
  }
  return std::max(1, CPU_COUNT(&all));
}

// An anonymous file: nothing is ever named in /dev/shm, so nothing can be
// left there, however any rank exits. Peers open it through
// /proc/<pid>/fd/<fd> while this rank holds it open (same user, same machine
// and PID namespace, which shm_ring needs anyway).
void ShmJoin::CreateSegment() {
  const size_t bytes = ring_.Layout();
  fd_ = memfd_create("ringlab-shm_ring", MFD_CLOEXEC);
  if (fd_ < 0) {
    throw CommError(std::string("shm_ring: memfd_create failed: ") +
                    std::strerror(errno));
  }
  // Owner only (memfds start 0777): reaching /proc/<pid>/fd already needs
  // this user's rights, and the file says so too.
  if (fchmod(fd_, 0600) != 0) {
    throw CommError(std::string("shm_ring: fchmod(0600) failed: ") +
                    std::strerror(errno));
  }
  // ftruncate reserves nothing: on a full tmpfs the first touch of a page
  // would be a SIGBUS. Reserve it all now and fail cleanly.
  const int err = posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    throw CommError(
        "shm_ring: cannot reserve " + std::to_string(bytes >> 20) +
        " MiB of shared memory for " + std::to_string(ring_.world_) +
        " ranks: " + std::strerror(err) +
        (err == ENOSPC || err == ENOMEM
             ? " (too little free memory; a smaller shm_ring.chunk_bytes, "
               "RINGLAB_SHM_CHUNK_BYTES, shrinks the segment)"
             : ""));
  }
  ring_.Map(bytes, fd_);
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) {
    nonce = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  auto* g = reinterpret_cast<GlobalHeader*>(ring_.base_);
  g->world_size = static_cast<uint64_t>(ring_.world_);
  g->chunk_bytes = ring_.chunk_;
  g->slots = ring_.slots_;
  g->small_bytes = ring_.small_;
  g->oneshot_bytes = ring_.oneshot_;
  g->stream_stores = ring_.stream_mode_;
  g->stage_bytes = ring_.stage_;
  g->ring_bytes = ring_.ring_;
  g->nonce = nonce;
  const std::string tag = SegmentTag(nonce);
  std::memcpy(g->tag, tag.data(), sizeof(g->tag));
  g->magic.store(kMagic, std::memory_order_release);
  ring_.Rank(ring_.rank_)->pid.store(getpid(), std::memory_order_release);
  verified_ = true;
  store_.Set(Key("name"), "memfd:" + std::to_string(getpid()) + ":" +
                              std::to_string(fd_) + ":" +
                              std::to_string(nonce));
  published_ = true;
  // Until every peer has mapped the segment (or one failed): only then may
  // the descriptor they open go.
  WaitFor(
      [&] {
        ThrowIfARankFailed();
        return store_.Add(Key("mapped"), 0) >= ring_.world_ - 1;
      },
      [&] { return "the peers to map the segment" + Unmapped(); });
  close(fd_);
  fd_ = -1;
  ring_.ncpu_ = CpusOfAllRanks();
  store_.Add(Key("state"), ring_.ncpu_);
}

void ShmJoin::OpenSegment() {
  std::string where;
  WaitFor(
      [&] {
        try {
          where = store_.Get(Key("name"), std::chrono::milliseconds(0));
          return true;
        } catch (const CommError&) {
          return false;
        }
      },
      [] { return std::string("rank 0 to publish its segment"); });
  if (where.rfind("error:", 0) == 0) {
    reported_ = true;  // it is rank 0's failure, already in the store
    throw CommError("shm_ring: rank 0 failed to create the segment: " +
                    where.substr(6));
  }
  long long pid0 = 0, fd0 = 0;
  unsigned long long nonce = 0;
  if (std::sscanf(where.c_str(), "memfd:%lld:%lld:%llu", &pid0, &fd0, &nonce) !=
      3) {
    throw CommError("shm_ring: bad segment address '" + where + "'");
  }
  const std::string path =
      "/proc/" + std::to_string(pid0) + "/fd/" + std::to_string(fd0);
  fd_ = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    // Rank 0 let the file go because some rank failed: name that one.
    ThrowIfARankFailed();
    throw CommError("shm_ring: rank " + std::to_string(ring_.rank_) +
                    " cannot open rank 0's segment at " + path + ": " +
                    std::strerror(errno) +
                    " (rank 0 gone, or not the same user, machine and PID "
                    "namespace)");
  }
  struct stat st;
  if (fstat(fd_, &st) != 0 || st.st_size < static_cast<off_t>(kPage)) {
    throw CommError("shm_ring: segment at " + path + " too small");
  }
  ring_.Map(static_cast<size_t>(st.st_size), fd_);
  close(fd_);
  fd_ = -1;
  auto* g = reinterpret_cast<GlobalHeader*>(ring_.base_);
  if (g->magic.load(std::memory_order_acquire) != kMagic || g->nonce != nonce ||
      !ConstantTimeEqual(
          std::string(reinterpret_cast<const char*>(g->tag), sizeof(g->tag)),
          SegmentTag(nonce))) {
    throw CommError("shm_ring: " + path + " is not this job's segment");
  }
  verified_ = true;
  if (g->world_size != static_cast<uint64_t>(ring_.world_)) {
    throw CommError("shm_ring: rank " + std::to_string(ring_.rank_) +
                    " has world_size " + std::to_string(ring_.world_) +
                    " but rank 0 has " + std::to_string(g->world_size));
  }
  ring_.chunk_ = g->chunk_bytes;
  ring_.slots_ = g->slots;
  ring_.small_ = g->small_bytes;
  ring_.oneshot_ = g->oneshot_bytes;
  ring_.stream_mode_ = g->stream_stores;
  ring_.stage_ = g->stage_bytes;
  ring_.ring_ = g->ring_bytes;
  if (ring_.Layout() != ring_.map_bytes_) {
    throw CommError("shm_ring: segment at " + path + " has the wrong size");
  }
  ring_.Rank(ring_.rank_)->pid.store(getpid(), std::memory_order_release);
  store_.Add(Key("mapped"), 1);
  // Rank 0 says when everyone is in; polled, so that a death or a peer's
  // failure ends the wait at once.
  WaitFor(
      [&] {
        ThrowIfARankFailed();
        ring_.ncpu_ = static_cast<int>(store_.Add(Key("state"), 0));
        return ring_.ncpu_ > 0;
      },
      [&] { return "the other ranks to map the segment" + Unmapped(); });
}

std::vector<int> ShmJoin::AllPids() {
  std::vector<int> pids(ring_.world_);
  for (int p = 0; p < ring_.world_; ++p) {
    pids[p] = std::stoi(store_.Get(Key("pid/" + std::to_string(p)), timeout_));
  }
  return pids;
}

void ShmJoin::Abandon(const std::string& message) {
  Report(message);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (ring_.base_ != nullptr && verified_) {
    // Peers that mapped already learn of it in their first wait.
    RankHeader* me = ring_.Rank(ring_.rank_);
    if (me->aborted.load() == 0) {
      std::snprintf(me->abort_message, sizeof(me->abort_message), "%s",
                    message.c_str());
      me->aborted.store(1, std::memory_order_release);
    }
  }
  if (ring_.base_ != nullptr) munmap(ring_.base_, ring_.map_bytes_);
  ring_.base_ = nullptr;
}

void ShmRing::ReadTuning() {
  // CreateCommunicator validated the ranges; rank 0's values are the ones
  // used (the others take them from the segment's header).
  const ShmRingTuning& tuning = options_.tuning.shm_ring;
  oneshot_ = tuning.oneshot_bytes;
  chunk_ = RoundUp(
      tuning.chunk_bytes.value_or(ShmRingTuning::kDefaultChunkBytes), kPage);
  small_ = RoundUp(std::max<size_t>(oneshot_, kPage), kPage);
  stream_mode_ = static_cast<uint64_t>(tuning.stores);
  stage_ = RoundUp(tuning.stage_bytes, kPage);
  ring_ = tuning.ring_bytes.value_or(kRingBytesChosenAtJoin);
  // The wavefront schedule in RingAllReduce never deadlocks when a mailbox
  // holds two wavefronts of 2(N-1) messages each.
  slots_ = std::max<uint64_t>(4, 4 * static_cast<uint64_t>(world_));
  // So that the segment grows as N rather than N^2: with the default chunk a
  // rank's mailbox is at most 8 MiB (from 17 ranks up, smaller chunks).
  if (!tuning.chunk_bytes) {
    constexpr size_t kMaxMailboxBytes = 8 << 20;
    chunk_ = std::max(
        kPage, std::min(chunk_, kMaxMailboxBytes / slots_ / kPage * kPage));
  }
}

// Rank 0 decides the layout; the others read its inputs from the segment.
size_t ShmRing::Layout() {
  rank_offset_ = kPage;
  slot_offset_ = rank_offset_ + RoundUp(sizeof(RankHeader) * world_, kPage);
  small_offset_ =
      slot_offset_ + RoundUp(sizeof(SlotHeader) * world_ * slots_, kPage);
  data_offset_ = small_offset_ + world_ * 2 * (small_ + kPage);
  stage_offset_ = data_offset_ + world_ * slots_ * chunk_;
  return stage_offset_ + world_ * stage_;
}

void ShmRing::ChooseWaitPolicy() {
  oversubscribed_ = world_ > ncpu_;
  // Measured at 2 ranks with a core each, the ring beat the staged path at
  // every size from 64 KiB (8 vs 17 us at 64 KiB, 123 vs 155 us at 1 MiB);
  // at 4 ranks on 2 cores the staged path won at every size (152 vs 338 us
  // at 256 KiB, 3.4 vs 5.5 ms at 4 MiB): the ring's 2(N-1) hand-offs per
  // chunk each cost a sleep and a wake-up when ranks share cores.
  if (ring_ == kRingBytesChosenAtJoin) {
    ring_ = oversubscribed_ ? std::numeric_limits<size_t>::max() : 0;
  }
  spin_ = std::chrono::nanoseconds(2000);
  yield_ = oversubscribed_ ? std::chrono::nanoseconds(20000)
                           : std::chrono::nanoseconds(100000);
  if (options_.tuning.shm_ring.debug) {
    std::fprintf(stderr, "shm_ring: rank %d: %d ranks on %d CPUs -> %s\n",
                 rank_, world_, ncpu_,
                 oversubscribed_ ? "oversubscribed" : "not oversubscribed");
  }
  stream_ =
      stream_mode_ == static_cast<uint64_t>(ShmRingTuning::Stores::kStreaming);
  if (stream_mode_ != static_cast<uint64_t>(ShmRingTuning::Stores::kMeasured) ||
      world_ == 1) {
    return;
  }
  // Whether the mailbox should bypass this core's cache depends on how far
  // apart the ranks' cores are. Measured on a 2-vCPU VM whose vCPUs the host
  // moves about: where a barrier takes ~0.2 us (cores sharing a cache),
  // cached stores were 2-2.7x faster from 16 KiB up; where it takes ~0.58
  // us, streaming stores were 2x faster, since the peer then reads from
  // memory instead of snooping a distant cache. The median of a few barriers
  // decides, averaged over ranks so that all decide alike.
  std::vector<double> t(65);
  for (double& x : t) {
    const auto t0 = Clock::now();
    Barrier();
    x = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  std::nth_element(t.begin(), t.begin() + 32, t.end());
  float median = static_cast<float>(t[32]);
  AllReduce(&median, 1, ReduceOp::kAvg);
  stream_ = median > 0.4e-6f;
  if (rank_ == 0 && options_.tuning.shm_ring.debug) {
    std::fprintf(stderr, "shm_ring: barrier median %.3f us -> %s stores\n",
                 median * 1e6, stream_ ? "streaming" : "cached");
  }
}

ShmRing::ShmRing(const RankContext& context, const CommOptions& options)
    : rank_(context.rank),
      world_(context.world_size),
      left_((context.rank + context.world_size - 1) % context.world_size),
      right_((context.rank + 1) % context.world_size),
      options_(options) {
  // First, before anything can throw: every rank's counter moves in step, so
  // the keys of the next communicator still match across ranks.
  const std::string prefix =
      "shm_ring/" + std::to_string(g_instances.fetch_add(1)) + "/";
  if (context.store == nullptr) {
    throw std::invalid_argument(
        "shm_ring needs a rendezvous store (set MASTER_ADDR and MASTER_PORT)");
  }
  ShmJoin join(*this, *context.store, prefix, options.join_timeout,
               context.job_secret);
  try {
    ReadTuning();
    join.Announce();
    if (rank_ == 0) {
      join.CreateSegment();
    } else {
      join.OpenSegment();
    }
    // Registered memory (Allocate) joins like the segment, through the same
    // store; the pids let its waits name a rank that dies.
    regions_ =
        std::make_unique<ShmRegions>(context.store, prefix, rank_, world_,
                                     join.AllPids(), options.join_timeout);
    ChooseWaitPolicy();
  } catch (const std::exception& e) {
    join.Abandon(e.what());
    throw;
  }
}

ShmRing::~ShmRing() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

void ShmRing::Map(size_t bytes, int fd) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    throw CommError(std::string("shm_ring: mmap failed: ") +
                    std::strerror(errno));
  }
  base_ = static_cast<char*>(p);
  map_bytes_ = bytes;
}

}  // namespace ringlab::comm::shm
