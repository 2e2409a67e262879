// The RINGLAB_* tuning variables (RINGLAB_SHM_*, RINGLAB_IPC_RING_*,
// RINGLAB_MPI_CHECK_CALLS; comm/tuning.h lists each with its setting) read
// into typed options, for binaries' main: the one place the environment
// speaks to the backends. Libraries take a BackendTuning instead.
#ifndef RINGLAB_COMM_TUNING_ENV_H_
#define RINGLAB_COMM_TUNING_ENV_H_

#include <functional>

#include "comm/tuning.h"

namespace ringlab::comm {

// getenv-like: a variable's value, or nullptr when it is unset.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// base, with every variable that lookup finds (an empty value counts as
// unset) in place of its setting. Values are whole numbers of bytes, or 0/1
// for the switches (RINGLAB_SHM_STREAM_STORES, RINGLAB_SHM_DEBUG,
// RINGLAB_MPI_CHECK_CALLS). Throws std::invalid_argument naming the variable
// for text that is not a number, or a number outside its setting's range
// (ValidateTuning's rule). Benchmarks' variants ("shm_ring:chunk=8192") use
// it with their own lookup.
BackendTuning OverrideTuning(const BackendTuning& base,
                             const EnvironmentLookup& lookup);
// The defaults overridden from lookup.
BackendTuning TuningFromEnvironment(const EnvironmentLookup& lookup);
// The defaults overridden from this process's environment.
BackendTuning TuningFromEnvironment();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_TUNING_ENV_H_
