// A timeline of training in the Chrome trace-event format (what Perfetto and
// chrome://tracing open, and what Horovod's timeline writes): one process per
// rank, a compute track (forward, backward per layer, the optimiser step,
// evaluation, and the time it waits for communication) and a communication
// track (each bucket's allreduce with its bytes). Spans are recorded in memory,
// thread-safely, and serialised once at the end; a disabled tracer records
// nothing, so the training loop calls it unconditionally.
#ifndef RINGLAB_TRACE_TRACE_H_
#define RINGLAB_TRACE_TRACE_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ringlab::trace {

enum class Track { kCompute = 0, kComm = 1 };

// Category of the spans in which the compute track is blocked on
// communication: their sum is the step's exposed communication.
inline constexpr char kExposedCommCategory[] = "exposed_comm";

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  Tracer(bool enabled, int rank) : enabled_(enabled), rank_(rank) {}
  bool enabled() const { return enabled_; }

  // bytes < 0: none shown.
  void Span(Track track, std::string name, const char* category,
            Clock::time_point start, Clock::time_point end, int64_t bytes = -1);

  // This rank's spans as a JSON array of trace events (with the metadata that
  // names its process and tracks).
  std::string EventsJson() const;

 private:
  struct Event {
    Track track;
    std::string name;
    const char* category;
    int64_t start_us, duration_us;
    int64_t bytes;
  };
  bool enabled_;
  int rank_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

// Joins every rank's EventsJson into one trace file {"traceEvents": [...],
// "displayTimeUnit": "ms"}, written through a temporary renamed into place.
void WriteTrace(const std::string& path,
                const std::vector<std::string>& rank_events);

// Records a span from construction to destruction (or End()).
class ScopedSpan {
 public:
  ScopedSpan(Tracer& tracer, Track track, std::string name,
             const char* category, int64_t bytes = -1)
      : tracer_(tracer),
        track_(track),
        name_(std::move(name)),
        category_(category),
        bytes_(bytes),
        start_(Tracer::Clock::now()) {}
  ~ScopedSpan() { End(); }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  void End() {
    if (ended_) return;
    ended_ = true;
    tracer_.Span(track_, std::move(name_), category_, start_,
                 Tracer::Clock::now(), bytes_);
  }

 private:
  Tracer& tracer_;
  Track track_;
  std::string name_;
  const char* category_;
  int64_t bytes_;
  Tracer::Clock::time_point start_;
  bool ended_ = false;
};

}  // namespace ringlab::trace

#endif  // RINGLAB_TRACE_TRACE_H_
