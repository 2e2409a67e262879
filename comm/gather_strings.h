// Every rank's bytes to every rank through Communicator::AllGather: what a
// job exchanges besides its training traffic (each rank's job description
// for the start-up agreement check, each rank's step records for rank 0's
// report), with whichever backend the job runs, host or device memory, and
// no store (MPI's ranks may have none). Bytes travel as the bit patterns of
// floats (memcpy in and out, never arithmetic), so any byte values do.
#ifndef RINGLAB_COMM_GATHER_STRINGS_H_
#define RINGLAB_COMM_GATHER_STRINGS_H_

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::comm {

// Collective: every rank calls it, in the same order as the other
// collectives. Returns every rank's `mine`, indexed by rank; lengths may
// differ. Two allgathers: the lengths, then the bytes padded to the longest.
// For a communicator on device memory (comm.memory() == kDevice) they are
// staged through a device buffer. Throws CommError when the collectives or
// the staging fail.
std::vector<std::string> AllGatherStrings(Communicator& comm,
                                          const std::string& mine);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_GATHER_STRINGS_H_
