#include "bench/benchmark_flags.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "bench/rank_output.h"
#include "benchmark/benchmark.h"
#include "cli/flags.h"
#include "cli/usage_error.h"
#include "io/dirs.h"

namespace ringlab::bench {
namespace {

constexpr char kOutFlag[] = "--benchmark_out=";

// Benchmark opens --benchmark_out only once the sweep is done: a path it
// could not write is found here, before anything runs, without making or
// changing a file (a probe beside it is made and removed: io/dirs.h).
std::string BadOutputFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (path.empty()) return "--benchmark_out needs a file name";
  if (fs::is_directory(path, error)) {
    return "--benchmark_out=" + path + " is a directory";
  }
  if (fs::exists(path, error)) {
    // Non-blocking: a FIFO nobody reads is refused, not waited on.
    const int fd =
        open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      return "--benchmark_out=" + path + " is not writable (" +
             std::strerror(errno) + ")";
    }
    close(fd);
    return "";
  }
  const fs::path parent = fs::path(path).has_parent_path()
                              ? fs::path(path).parent_path()
                              : fs::path(".");
  if (!fs::is_directory(parent, error)) {
    return "--benchmark_out=" + path + ": no directory " + parent.string();
  }
  const std::string why = io::WhyNotWritable(parent.string());
  if (!why.empty()) {
    return "--benchmark_out=" + path + ": its directory is not writable (" +
           why + ")";
  }
  return "";
}

// Values Benchmark's Initialize would answer with its usage and exit
// status 0 rather than refuse.
std::string BadBenchmarkValue(const std::string& arg) {
  for (const char* flag : {"--benchmark_format=", "--benchmark_out_format="}) {
    if (arg.rfind(flag, 0) != 0) continue;
    const std::string value = arg.substr(std::strlen(flag));
    if (value != "console" && value != "json" && value != "csv") {
      return std::string(flag) + value + ": expected console, json or csv";
    }
  }
  if (arg == "--benchmark_color=") return "--benchmark_color needs a value";
  return "";
}

// Runs benchmark::Initialize with its complaints (a line of its own on
// stderr for a value it cannot parse) captured, so that a bad flag is one
// line; returns what it printed.
std::string InitializeQuietly(int* count, char** args) {
  std::fflush(stderr);
  std::cerr.flush();
  FILE* captured = std::tmpfile();
  const int saved = dup(STDERR_FILENO);
  if (captured != nullptr && saved >= 0) dup2(fileno(captured), STDERR_FILENO);
  benchmark::Initialize(count, args);
  std::cerr.flush();
  std::fflush(stderr);
  std::string text;
  if (captured != nullptr && saved >= 0) {
    dup2(saved, STDERR_FILENO);
    std::rewind(captured);
    char buffer[512];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), captured)) > 0;) {
      text.append(buffer, n);
    }
  }
  if (saved >= 0) close(saved);
  if (captured != nullptr) std::fclose(captured);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

void ParseBenchmarkFlagsOrExit(int argc, char** argv,
                               const std::string& usage) {
  std::vector<char*> rest = cli::ParseFlagsOrExit(
      argc, argv,
      usage +
          "\n\n  Google Benchmark's flags apply too: --benchmark_filter=REGEX, "
          "--benchmark_out=FILE, --benchmark_out_format=json|csv|console, "
          "--benchmark_min_time=SECONDS, --benchmark_repetitions=N, "
          "--benchmark_report_aggregates_only=true, ...",
      {"bench/", "comm/cluster/"}, {"--benchmark_"});
  for (size_t i = 1; i < rest.size(); ++i) {
    const std::string arg = rest[i];
    const std::string bad =
        arg.rfind(kOutFlag, 0) == 0
            ? BadOutputFile(arg.substr(std::strlen(kOutFlag)))
            : BadBenchmarkValue(arg);
    if (!bad.empty()) cli::ExitWithUsageError(bad);
  }
  int count = static_cast<int>(rest.size());
  DropFileOutputUnlessRankZero(&count, rest.data());
  const std::string complaint = InitializeQuietly(&count, rest.data());
  // What Benchmark leaves is what it could not parse.
  if (count > 1) {
    std::string line =
        "invalid Google Benchmark flag '" + std::string(rest[1]) + "'";
    if (!complaint.empty()) {
      line += " (" + complaint.substr(0, complaint.find('\n')) + ")";
    }
    cli::ExitWithUsageError(line);
  }
  if (!complaint.empty()) std::fprintf(stderr, "%s\n", complaint.c_str());
}

}  // namespace ringlab::bench
