// One training step of one rank as the run reports it (losses.csv) and a
// checkpoint keeps it (history.csv): the same CSV both ways, floats in text
// that reads back as the same bits.
#ifndef RINGLAB_TRAIN_STEP_RECORD_H_
#define RINGLAB_TRAIN_STEP_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ringlab::train {

struct StepRecord {
  int64_t epoch = 0;
  int64_t step = 0;
  float loss = 0;
  double step_ms = 0;
  double comm_ms = 0;  // the time the compute thread waited on communication
  uint64_t bytes_sent = 0;
};

// "rank,epoch,step,loss,step_ms,comm_ms,bytes_sent" rows (with the header
// line when header is true).
std::string StepRecordsToCsv(const std::vector<StepRecord>& records, int rank,
                             bool header);

// The rows of a CSV StepRecordsToCsv wrote (header included); throws
// std::invalid_argument naming `what` and the first bad line.
std::vector<StepRecord> StepRecordsFromCsv(const std::string& text,
                                           const std::string& what);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_STEP_RECORD_H_
