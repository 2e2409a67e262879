// The RINGLAB_* tuning variables (RINGLAB_CHECK_CALLS, RINGLAB_SHM_*,
// RINGLAB_IPC_RING_*: each setting names its own, comm/tuning.h) read into
// a BackendTuning, for binaries' main: the one place the environment speaks
// to the backends. Libraries take a BackendTuning instead. Only the settings
// of the backends linked into the binary are read.
#ifndef RINGLAB_COMM_TUNING_ENV_H_
#define RINGLAB_COMM_TUNING_ENV_H_

#include <functional>

#include "comm/tuning.h"

namespace ringlab::comm {

// getenv-like: a variable's value, or nullptr when it is unset.
using EnvironmentLookup = std::function<const char*(const char* name)>;

// base, with every variable that lookup finds (an empty value counts as
// unset) in place of its setting. Values are whole numbers of bytes, or 0/1
// for the switches (RINGLAB_CHECK_CALLS, RINGLAB_SHM_STREAM_STORES, ...).
// Throws std::invalid_argument naming the variable for text that is not a
// number, or a number outside its setting's range (ValidateTuning's rule).
// Benchmarks' variants ("shm_ring:chunk=8192") use it with their own lookup.
BackendTuning OverrideTuning(const BackendTuning& base,
                             const EnvironmentLookup& lookup);
// The defaults overridden from lookup.
BackendTuning TuningFromEnvironment(const EnvironmentLookup& lookup);
// The defaults overridden from this process's environment.
BackendTuning TuningFromEnvironment();

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_TUNING_ENV_H_
