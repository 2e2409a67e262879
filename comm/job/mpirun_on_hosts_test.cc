// Open MPI's parameters for ranks on emulated hosts: a waiting rank yields
// its core only when the job has more ranks than the machine has cores, and
// ringlab's allreduce rules give way to a user who tunes Open MPI's
// collectives through the environment.
#include "comm/job/mpirun_on_hosts.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/job/launch_variables.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

bool HasParameter(const std::vector<std::string>& args, const std::string& name,
                  const std::string& value) {
  for (size_t i = 0; i + 2 < args.size(); ++i) {
    if (args[i] == "--mca" && args[i + 1] == name && args[i + 2] == value) {
      return true;
    }
  }
  return false;
}

TEST(OpenMpiTuningTest, RanksYieldTheirCoreOnlyWhenTheyOutnumberTheCores) {
  EXPECT_TRUE(
      HasParameter(OpenMpiTuning(4, 2, "r"), "mpi_yield_when_idle", "1"));
  EXPECT_FALSE(
      HasParameter(OpenMpiTuning(2, 2, "r"), "mpi_yield_when_idle", "1"));
}

TEST(OpenMpiTuningTest, TheAllreduceRulesGiveWayToTheUsersChoice) {
  unsetenv(launch::kOmpiCollTunedAllreduceAlgorithm);
  const std::vector<std::string> ours = OpenMpiTuning(2, 2, "/dir/rules");
  EXPECT_TRUE(HasParameter(ours, "coll_tuned_use_dynamic_rules", "1"));
  EXPECT_TRUE(
      HasParameter(ours, "coll_tuned_dynamic_rules_filename", "/dir/rules"));

  setenv(launch::kOmpiCollTunedAllreduceAlgorithm, "4", 1);
  const std::vector<std::string> users = OpenMpiTuning(2, 2, "/dir/rules");
  unsetenv(launch::kOmpiCollTunedAllreduceAlgorithm);
  EXPECT_FALSE(HasParameter(users, "coll_tuned_use_dynamic_rules", "1"));
  EXPECT_FALSE(
      HasParameter(users, "coll_tuned_dynamic_rules_filename", "/dir/rules"));
}

}  // namespace
}  // namespace ringlab::comm
