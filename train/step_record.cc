#include "train/step_record.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace ringlab::train {

std::string StepRecordsToCsv(const std::vector<StepRecord>& records, int rank,
                             bool header) {
  std::string text =
      header ? "rank,epoch,step,loss,step_ms,comm_ms,bytes_sent\n" : "";
  char line[256];
  for (const StepRecord& r : records) {
    // %.9g round-trips a float exactly.
    std::snprintf(line, sizeof(line), "%d,%lld,%lld,%.9g,%.6f,%.6f,%llu\n",
                  rank, static_cast<long long>(r.epoch),
                  static_cast<long long>(r.step), r.loss, r.step_ms, r.comm_ms,
                  static_cast<unsigned long long>(r.bytes_sent));
    text += line;
  }
  return text;
}

std::vector<StepRecord> StepRecordsFromCsv(const std::string& text,
                                           const std::string& what) {
  std::vector<StepRecord> records;
  std::istringstream lines(text);
  std::string line;
  std::getline(lines, line);  // header
  while (std::getline(lines, line)) {
    StepRecord r;
    int file_rank = 0;
    long long epoch = 0, step = 0;
    unsigned long long bytes = 0;
    if (std::sscanf(line.c_str(), "%d,%lld,%lld,%g,%lf,%lf,%llu", &file_rank,
                    &epoch, &step, &r.loss, &r.step_ms, &r.comm_ms,
                    &bytes) != 7) {
      throw std::invalid_argument(what + ": bad line '" + line + "'");
    }
    r.epoch = epoch;
    r.step = step;
    r.bytes_sent = bytes;
    records.push_back(r);
  }
  return records;
}

}  // namespace ringlab::train
