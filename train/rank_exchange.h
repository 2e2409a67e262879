// Small host-side exchanges between ranks that are not training traffic: every
// rank's job description for the start-up agreement check, and every rank's
// per-step records for rank 0's report. They go through the communicator when
// it works on host memory (MPI has no store), else through the rendezvous
// store (a GPU communicator cannot take host pointers).
#ifndef RINGLAB_TRAIN_RANK_EXCHANGE_H_
#define RINGLAB_TRAIN_RANK_EXCHANGE_H_

#include <chrono>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/store.h"

namespace ringlab::train {

class RankExchange {
 public:
  RankExchange(comm::Communicator& comm, comm::Store* store,
               std::chrono::milliseconds timeout)
      : comm_(comm), store_(store), timeout_(timeout) {}

  // Every rank's bytes, indexed by rank; lengths may differ. Every rank must
  // call it, in the same order as the other collectives.
  std::vector<std::string> AllGather(const std::string& mine);

 private:
  // Floats of equal count on every rank, exactly (bit for bit).
  std::vector<std::vector<float>> AllGatherFloats(
      const std::vector<float>& mine);

  comm::Communicator& comm_;
  comm::Store* store_;
  std::chrono::milliseconds timeout_;
  int sequence_ = 0;
};

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_RANK_EXCHANGE_H_
