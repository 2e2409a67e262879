// The conformance suite (comm/testing/conformance.h) over the mpi backend,
// whose ranks are mpirun's processes: `--list` prints the case names,
// `--case=NAME` runs one case on every rank. conformance_mpi_test.sh runs
// each case under mpirun at 2 and 3 ranks. The fault cases are not here: a
// dead rank ends an MPI job (mpirun names it), there are no survivors.
#include <gflags/gflags.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "cli/flags.h"
#include "comm/communicator.h"
#include "comm/job/rendezvous.h"
#include "comm/testing/conformance.h"
#include "comm/tuning_env.h"

DEFINE_bool(list, false, "print the case names (and what each must name)");
DEFINE_string(case, "", "run this case on every rank");

namespace ringlab::comm::testing {
namespace {

int Run(const std::string& name, const BackendTuning& tuning) {
  for (const ConformanceCase& c : AllCases()) {
    if (c.name != name) continue;
    auto rendezvous = Rendezvous::FromEnv(std::chrono::seconds(30));
    CommOptions options;
    options.timeout = std::chrono::seconds(30);
    options.join_timeout = std::chrono::seconds(30);
    options.tuning = tuning;
    auto comm = CreateCommunicator("mpi", rendezvous->context(), options);
    if (comm->world_size() < c.min_world) {
      std::printf("conformance_mpi: %s needs %d ranks: skipped\n", name.c_str(),
                  c.min_world);
      return 0;
    }
    // Capture what the mismatch case prints: MPI checks every call on every
    // rank, so every rank's error must name both values.
    std::fflush(stdout);
    c.run(*comm, TraitsOf("mpi"));
    comm->Barrier();
    std::printf("conformance_mpi: %s rank %d of %d OK\n", name.c_str(),
                comm->rank(), comm->world_size());
    return 0;
  }
  std::fprintf(stderr, "error: no conformance case '%s'\n", name.c_str());
  return 2;
}

}  // namespace
}  // namespace ringlab::comm::testing

int main(int argc, char** argv) {
  using ringlab::comm::testing::AllCases;
  ringlab::cli::ParseFlagsOrExit(
      argc, argv,
      "the communicator conformance suite over mpi, one case per run, under "
      "mpirun: --list | --case=NAME",
      "comm/");
  if (FLAGS_list == !FLAGS_case.empty()) {
    ringlab::cli::ExitWithUsageError("give exactly one of --list and --case");
  }
  if (FLAGS_list) {
    for (const auto& c : AllCases()) {
      std::printf("%s", c.name.c_str());
      for (const std::string& s : c.must_name) std::printf(" %s", s.c_str());
      std::printf("\n");
    }
    return 0;
  }
  ringlab::comm::BackendTuning tuning;  // RINGLAB_MPI_CHECK_CALLS and co.
  try {
    tuning = ringlab::comm::TuningFromEnvironment();
  } catch (const std::invalid_argument& e) {
    ringlab::cli::ExitWithUsageError(e.what());
  }
  try {
    return ringlab::comm::testing::Run(FLAGS_case, tuning);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "conformance_mpi: FAILED: %s\n", e.what());
    return 1;
  }
}
