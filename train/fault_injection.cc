#include "train/fault_injection.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <stdexcept>

#include "sync/options.h"  // kMaxSteps

namespace ringlab::train {
namespace {

const char* const kFaultPoints[] = {"after_step",   "part_written",
                                    "part_renamed", "before_latest",
                                    "before_prune", "before_promote"};

}  // namespace

void ValidateFaultInjection(const FaultInjection& f, int world_size) {
  if (f.after_step < -1 || f.after_step > sync::kMaxSteps) {
    throw std::invalid_argument("--fault_after_step must be in [-1, " +
                                std::to_string(sync::kMaxSteps) + "], not " +
                                std::to_string(f.after_step));
  }
  const int last = std::max(world_size, 1) - 1;
  if (f.rank < 0 || f.rank > last) {
    throw std::invalid_argument("--fault_rank must be in [0, " +
                                std::to_string(last) + "], not " +
                                std::to_string(f.rank));
  }
  if (std::find(std::begin(kFaultPoints), std::end(kFaultPoints), f.point) ==
      std::end(kFaultPoints)) {
    throw std::invalid_argument("unknown --fault_point=" + f.point);
  }
}

void MaybeFault(const FaultInjection& f, int rank, int64_t step,
                const char* point) {
  if (step == f.after_step && rank == f.rank && f.point == point) {
    std::fflush(nullptr);
    raise(SIGKILL);
  }
}

}  // namespace ringlab::train
