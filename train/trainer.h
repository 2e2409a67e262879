// The training loop one rank runs: data, PyTorch-identical initialisation, the
// start-up agreement check and rank 0's broadcast (as DDP's constructor), the
// DistributedSampler's batches, forward/backward with the synchroniser's
// bucket reducer, SGD, evaluation, checkpoints, and the run's outputs
// (outputs.h).
#ifndef RINGLAB_TRAIN_TRAINER_H_
#define RINGLAB_TRAIN_TRAINER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/fault_injection.h"
#include "train/job_checks.h"
#include "train/train_config.h"

namespace ringlab::train {

// What crossed this rank's host's link during its training steps (the
// host's eth0, shared by its ranks), on an emulated host.
struct LinkTraffic {
  int host = -1;
  uint64_t sent = 0;
  uint64_t received = 0;
};

struct TrainResult {
  std::vector<float> final_params;      // this rank's, on the host
  std::vector<StepRecord> history;      // this rank's
  std::vector<EvalRecord> evaluations;  // rank 0's, of this run's epochs
  std::string trace_events;             // this rank's, with --trace
  std::optional<LinkTraffic> link;      // on an emulated host
};

// Runs one rank to the end. Rank 0 writes the outputs when out_dir is set.
// Throws std::invalid_argument for bad input (files, disagreeing ranks) and
// comm::CommError / std::runtime_error for failures.
// Makes the communicator among the ranks of this rank's host, for
// --post_local_subgroup=host; called once the ranks agree on the settings
// (so that a rank with other ones fails the agreement instead of leaving the
// others waiting to meet it).
using HostCommFactory = std::function<std::unique_ptr<comm::Communicator>()>;

// faults: testing only (fault_injection.h). make_host_comm: where the
// settings want one (its bytes count as sent).
TrainResult RunRank(const TrainConfig& config, comm::Communicator& comm,
                    const FaultInjection& faults = {},
                    const HostCommFactory& make_host_comm = nullptr);

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_TRAINER_H_
