#include "trace/trace.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "io/atomic_file.h"

namespace ringlab::trace {
namespace {

int64_t Microseconds(Tracer::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             t.time_since_epoch())
      .count();
}

nlohmann::json Metadata(const char* what, int pid, int tid,
                        const std::string& name) {
  return {{"ph", "M"},
          {"name", what},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"name", name}}}};
}

}  // namespace

void Tracer::Span(Track track, std::string name, const char* category,
                  Clock::time_point start, Clock::time_point end,
                  int64_t bytes) {
  if (!enabled_) return;
  const int64_t start_us = Microseconds(start);
  Event event{track,
              std::move(name),
              category,
              start_us,
              std::max<int64_t>(Microseconds(end) - start_us, 0),
              bytes};
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(event));
}

std::string Tracer::EventsJson() const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(
      Metadata("process_name", rank_, 0, "rank " + std::to_string(rank_)));
  events.push_back(Metadata("process_sort_index", rank_, 0, ""));
  events.back()["args"] = {{"sort_index", rank_}};
  events.push_back(Metadata("thread_name", rank_, 0, "compute"));
  events.push_back(Metadata("thread_name", rank_, 1, "communication"));
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Event& e : events_) {
    nlohmann::json event = {{"ph", "X"},
                            {"pid", rank_},
                            {"tid", static_cast<int>(e.track)},
                            {"name", e.name},
                            {"cat", e.category},
                            {"ts", e.start_us},
                            {"dur", e.duration_us}};
    if (e.bytes >= 0) event["args"] = {{"bytes", e.bytes}};
    events.push_back(std::move(event));
  }
  return events.dump();
}

void WriteTrace(const std::string& path,
                const std::vector<std::string>& rank_events) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& text : rank_events) {
    for (auto& event : nlohmann::json::parse(text)) {
      all.push_back(std::move(event));
    }
  }
  const nlohmann::json trace = {{"traceEvents", std::move(all)},
                                {"displayTimeUnit", "ms"}};
  io::WriteFileAtomically(path, trace.dump() + "\n");
}

}  // namespace ringlab::trace
