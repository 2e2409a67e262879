// The "error: ..." lines a launch's ranks write, as the user should read
// them: a bad input only a rank can find (a corrupt file body) is found by
// every rank, and N copies of one line hide which rank failed first and
// why. The launcher holds each rank's error lines back (RankErrors::Hold),
// keeps one per distinct text with a count of the ranks that said the same,
// and at the job's end writes them once (RankErrors::Report), its own last
// line naming the rank that caused the failure: the first to report the
// error it failed with, or a stopped rank its peers gave up waiting for.
#ifndef RINGLAB_COMM_JOB_RANK_ERRORS_H_
#define RINGLAB_COMM_JOB_RANK_ERRORS_H_

#include <string>
#include <vector>

namespace ringlab::comm {

// How the job ended, as the launcher saw it.
struct JobEnd {
  int failed_rank = -1;   // the rank blamed by reaping; -1: none failed
  bool signaled = false;  // it died of a signal (its own error is moot)
  std::string failure;    // the launcher's line for it, "error: rank ..."
  int stopped_rank = -1;  // a rank found stopped when the failure came
};

class RankErrors {
 public:
  // Takes one complete line rank wrote to stderr (with its newline); true
  // when it is an error line and so is held, to be written by Report.
  bool Hold(int rank, const std::string& line);

  // What the launcher writes at the end: the errors held, once each with
  // "(and N ranks reported the same)", then its last line. For a job that
  // ended well, the held lines only.
  std::string Report(const JobEnd& end) const;

 private:
  struct Error {
    std::string text;  // after "error: ", without the newline
    int first_rank;
    std::vector<int> others;  // the ranks that reported the same later
  };
  static std::string Echoed(const Error& e);
  const Error* ReportedBy(int rank) const;

  std::vector<Error> errors_;  // in the order first reported
  int held_lines_ = 0;
};

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_JOB_RANK_ERRORS_H_
