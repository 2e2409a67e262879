// Where the launcher forwards its ranks' lines: one of its own descriptors
// (stdout, stderr), written by a thread of its own, so that a reader that
// stops reading — a terminal stopped with Ctrl-Z or Ctrl-S, `| less` left
// on one page, a pipe nobody reads — never stops the launcher, and so never
// the ranks, whose pipes it keeps draining. What the descriptor does not
// take waits in a bounded buffer; beyond the bound whole lines are dropped
// and counted, and said so once the reader catches up. A reader that went
// away (EPIPE: the launcher ignores SIGPIPE) ends the forwarding, not the
// job.
#ifndef RINGLAB_COMM_JOB_OUTPUT_SINK_H_
#define RINGLAB_COMM_JOB_OUTPUT_SINK_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ringlab::comm {

class OutputSink {
 public:
  static constexpr size_t kDefaultLimit = size_t{4} << 20;

  // Forwards to fd (not owned), holding at most `limit` bytes unwritten.
  explicit OutputSink(int fd, size_t limit = kDefaultLimit);
  // Stops the writer without waiting for a write that blocks (its thread is
  // left to the process's end); call Flush first to wait a bounded time.
  ~OutputSink();
  OutputSink(const OutputSink&) = delete;
  OutputSink& operator=(const OutputSink&) = delete;

  // Whole lines ("...\n"); never blocks. Lines that do not fit under the
  // limit are dropped (counted).
  void Append(const std::string& lines);
  // Waits up to `wait` until everything appended is written (the count of
  // dropped lines included, as a last line); false when it was not.
  bool Flush(std::chrono::milliseconds wait);

  // Lines dropped so far, those of them not yet said on the descriptor,
  // and whether the descriptor refused (EPIPE, EBADF).
  int64_t dropped_lines() const;
  int64_t unsaid_dropped_lines() const;
  bool closed() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;  // the writer thread holds it too
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_OUTPUT_SINK_H_
