// The benchmarks' backend specs: a backend's name, optionally with tuning,
// "shm_ring:oneshot=B:chunk=B:stream=0|1:stage=B:ring=B" or "mpi:check=0"
// (plain MPI_Allreduce, without the front's cross-rank call check). An
// option is a setting's short name in the descriptions (comm/backend.h:
// TuningSetting::option), the backend's own or the front's; each is read as
// its RINGLAB_* variable is (comm/tuning_env.h: same numbers, same ranges)
// over the tuning the binary started with, and reaches the backend as
// CommOptions::tuning.
#ifndef RINGLAB_BENCH_BACKEND_VARIANTS_H_
#define RINGLAB_BENCH_BACKEND_VARIANTS_H_

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/tuning.h"

namespace ringlab::bench {

// The non-empty items of s between separators.
std::vector<std::string> SplitList(const std::string& s, char separator);

// base with the options of `spec` applied. Throws std::invalid_argument
// naming the spec for an option it does not know or a value outside its
// setting's range.
comm::BackendTuning VariantTuning(const std::string& spec,
                                  const comm::BackendTuning& base);

// The communicator `spec` describes: options.tuning with the spec's options.
// Throws as VariantTuning does, and whatever CreateCommunicator throws.
std::unique_ptr<comm::Communicator> CreateVariant(
    const std::string& spec, const comm::RankContext& context,
    const comm::CommOptions& options);

}  // namespace ringlab::bench

#endif  // RINGLAB_BENCH_BACKEND_VARIANTS_H_
