// A test hook, kept out of a job's configuration: rank `rank` kills itself with
// SIGKILL at `point` of step `after_step`, as a crashed process would stop
// there: "after_step" (after the step and its checkpoint), or inside the
// step's checkpoint: "part_written" (its files on disk, not yet renamed into
// place), "part_renamed" (its part in place, before the barrier),
// "before_latest" (after the barrier), "before_prune" (rank 0: latest
// moved, older steps still there) and "before_promote" (rank 0: a fresh
// run's first checkpoint complete in the staging directory, not yet in the
// previous checkpoints' place). The checkpoint and fault tests drive it
// through the CLI's testing flags.
#ifndef RINGLAB_TRAIN_FAULT_INJECTION_H_
#define RINGLAB_TRAIN_FAULT_INJECTION_H_

#include <cstdint>
#include <string>

namespace ringlab::train {

struct FaultInjection {
  int64_t after_step = -1;  // -1: never
  int rank = 0;
  std::string point = "after_step";
};

// Throws std::invalid_argument for a step below -1, a rank outside the job
// or an unknown point.
void ValidateFaultInjection(const FaultInjection& faults, int world_size);

// Kills this process when (rank, step, point) is the planned one.
void MaybeFault(const FaultInjection& faults, int rank, int64_t step,
                const char* point);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_FAULT_INJECTION_H_
