#include "comm/job/output_sink.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "comm/process.h"

namespace ringlab::comm {

struct OutputSink::Shared {
  explicit Shared(int out, size_t max) : fd(out), limit(max) {}
  const int fd;
  const size_t limit;
  std::mutex mutex;
  std::condition_variable changed;
  std::string pending;   // appended, not yet taken by the writer
  bool writing = false;  // the writer holds a piece it is writing
  int64_t dropped = 0;   // lines dropped
  int64_t reported = 0;  // of which said so
  bool closed = false;   // the descriptor refused
  bool stop = false;

  // The writer: takes what is pending and writes it, blocking as long as
  // the descriptor does (the launcher does not).
  void Run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] {
        return stop || !pending.empty() || (dropped > reported && !closed);
      });
      if (stop && pending.empty()) return;
      if (pending.empty() && dropped > reported) {
        pending = "[launcher] " + std::to_string(dropped - reported) +
                  " line(s) of the ranks' output dropped: it was not read "
                  "for a while\n";
        reported = dropped;
      }
      std::string piece;
      piece.swap(pending);
      writing = true;
      lock.unlock();
      const bool ok = closed || WriteFully(fd, piece);
      lock.lock();
      writing = false;
      if (!ok) closed = true;
      changed.notify_all();
    }
  }
};

OutputSink::OutputSink(int fd, size_t limit)
    : shared_(std::make_shared<Shared>(fd, limit)) {
  std::thread([shared = shared_] { shared->Run(); }).detach();
}

OutputSink::~OutputSink() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->stop = true;
  shared_->pending.clear();
  shared_->changed.notify_all();
}

void OutputSink::Append(const std::string& lines) {
  if (lines.empty()) return;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (shared_->closed) return;
  if (shared_->pending.size() + lines.size() > shared_->limit) {
    shared_->dropped += std::count(lines.begin(), lines.end(), '\n');
    return;
  }
  shared_->pending += lines;
  shared_->changed.notify_all();
}

bool OutputSink::Flush(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(shared_->mutex);
  return shared_->changed.wait_for(lock, wait, [&] {
    return shared_->closed || (shared_->pending.empty() && !shared_->writing &&
                               shared_->reported == shared_->dropped);
  });
}

int64_t OutputSink::dropped_lines() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->dropped;
}

int64_t OutputSink::unsaid_dropped_lines() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->dropped - shared_->reported;
}

bool OutputSink::closed() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->closed;
}

}  // namespace ringlab::comm
