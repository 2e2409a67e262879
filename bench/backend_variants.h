// allreduce_bench's backend specs: a backend's name, optionally with tuning,
// "shm_ring:oneshot=B:chunk=B:stream=B:stage=B:ring=B" or "mpi:check=0"
// (plain MPI_Allreduce, without mpi's cross-rank call check). The tuning
// reaches the backend through its RINGLAB_* environment variables, set only
// while the communicator is created.
#ifndef RINGLAB_BENCH_BACKEND_VARIANTS_H_
#define RINGLAB_BENCH_BACKEND_VARIANTS_H_

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ringlab::bench {

// The non-empty items of s between separators.
std::vector<std::string> SplitList(const std::string& s, char separator);

// The communicator `spec` describes. Throws std::invalid_argument for an
// option it does not know, and whatever CreateCommunicator throws.
std::unique_ptr<comm::Communicator> CreateVariant(
    const std::string& spec, const comm::RankContext& context,
    const comm::CommOptions& options);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_BACKEND_VARIANTS_H_
