#include "comm/job/rank_errors.h"

#include <algorithm>
#include <string>

namespace ringlab::comm {
namespace {

constexpr char kErrorPrefix[] = "error: ";
// Bounds on what is held, so that a rank printing error lines in a loop
// cannot grow the launcher: past them lines are passed through as they come.
constexpr int kMaxHeldLines = 1000;
constexpr size_t kMaxDistinctErrors = 64;
constexpr size_t kMaxErrorText = 4096;

std::string AndTheSame(size_t others) {
  if (others == 0) return "";
  return " (and " + std::to_string(others) +
         (others == 1 ? " rank" : " ranks") + " reported the same)";
}

}  // namespace

bool RankErrors::Hold(int rank, const std::string& line) {
  const size_t n = sizeof(kErrorPrefix) - 1;
  if (line.compare(0, n, kErrorPrefix) != 0) return false;
  if (held_lines_ >= kMaxHeldLines) return false;
  std::string text = line.substr(n, kMaxErrorText);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  for (Error& e : errors_) {
    if (e.text != text) continue;
    if (e.first_rank != rank &&
        std::find(e.others.begin(), e.others.end(), rank) == e.others.end()) {
      e.others.push_back(rank);
    }
    ++held_lines_;
    return true;
  }
  if (errors_.size() >= kMaxDistinctErrors) return false;
  errors_.push_back({std::move(text), rank, {}});
  ++held_lines_;
  return true;
}

std::string RankErrors::Echoed(const Error& e) {
  return "[rank " + std::to_string(e.first_rank) + "] error: " + e.text +
         AndTheSame(e.others.size()) + "\n";
}

const RankErrors::Error* RankErrors::ReportedBy(int rank) const {
  for (const Error& e : errors_) {
    if (e.first_rank == rank ||
        std::find(e.others.begin(), e.others.end(), rank) != e.others.end()) {
      return &e;
    }
  }
  return nullptr;
}

std::string RankErrors::Report(const JobEnd& end) const {
  // The error that becomes the last line, when one explains the failure:
  // for a stopped rank, what its first peer to give up said; for an exit
  // status, what the failed rank said. A signal death explains itself.
  const Error* cause = nullptr;
  std::string last = end.failure;
  if (end.stopped_rank >= 0) {
    for (const Error& e : errors_) {
      if (e.first_rank != end.stopped_rank) {
        cause = &e;
        break;
      }
    }
    last = "error: rank " + std::to_string(end.stopped_rank) +
           " is stopped (SIGSTOP or Ctrl-Z), and its peers gave up on it";
    if (cause != nullptr) {
      last += ": rank " + std::to_string(cause->first_rank) + ": " +
              cause->text + AndTheSame(cause->others.size());
    }
  } else if (end.failed_rank >= 0 && !end.signaled) {
    cause = ReportedBy(end.failed_rank);
    if (cause != nullptr) {
      last = "error: rank " + std::to_string(cause->first_rank) + ": " +
             cause->text + AndTheSame(cause->others.size());
    }
  }
  std::string out;
  for (const Error& e : errors_) {
    if (&e != cause) out += Echoed(e);
  }
  if (!last.empty()) out += last + "\n";
  return out;
}

}  // namespace ringlab::comm
