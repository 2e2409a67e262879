// Open MPI's parameters for ranks on emulated hosts: a waiting rank yields
// its core only when the job has more ranks than the machine has cores, and
// ringlab's allreduce rules give way to a user who tunes Open MPI's
// collectives through the environment, and choose what they are meant to.
#include "comm/job/mpirun_on_hosts.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>
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

// Each of Open MPI's three variables alone is the user's choice: with any
// one set, ringlab names neither its rules nor their use (through only the
// algorithm's did the user's choice win).
TEST(OpenMpiTuningTest, TheAllreduceRulesGiveWayToEachOfTheUsersVariables) {
  const char* const variables[] = {launch::kOmpiCollTunedAllreduceAlgorithm,
                                   launch::kOmpiCollTunedUseDynamicRules,
                                   launch::kOmpiCollTunedDynamicRulesFilename};
  for (const char* name : variables) unsetenv(name);
  const std::vector<std::string> ours = OpenMpiTuning(2, 2, "/dir/rules");
  EXPECT_TRUE(HasParameter(ours, "coll_tuned_use_dynamic_rules", "1"));
  EXPECT_TRUE(
      HasParameter(ours, "coll_tuned_dynamic_rules_filename", "/dir/rules"));
  for (const char* name : variables) {
    SCOPED_TRACE(name);
    setenv(name, "4", 1);
    const std::vector<std::string> users = OpenMpiTuning(2, 2, "/dir/rules");
    unsetenv(name);
    for (const std::string& arg : users) {
      EXPECT_EQ(arg.find("coll_tuned"), std::string::npos) << arg;
    }
  }
}

// The algorithm Open MPI's tuned allreduce takes from a dynamic rules file
// for `ranks` ranks and a message of `bytes`, read as Open MPI reads it: the
// rule of the largest communicator size not above `ranks`, in it the rule of
// the largest message size not above `bytes`; -1 where no rule holds.
int AllreduceAlgorithm(const std::string& rules, int ranks, int64_t bytes) {
  std::istringstream in(rules);
  int collectives = 0;
  EXPECT_TRUE(in >> collectives);
  int chosen = -1;
  for (int c = 0; c < collectives; ++c) {
    int id = 0, sizes = 0;
    EXPECT_TRUE(in >> id >> sizes);
    int best_size = 0;
    for (int s = 0; s < sizes; ++s) {
      int size = 0, messages = 0;
      EXPECT_TRUE(in >> size >> messages);
      int64_t best_bytes = -1;
      int algorithm_here = -1;
      for (int m = 0; m < messages; ++m) {
        int64_t from = 0;
        int algorithm = 0, fan = 0, segment = 0;
        EXPECT_TRUE(in >> from >> algorithm >> fan >> segment);
        if (from <= bytes && from > best_bytes) {
          best_bytes = from;
          algorithm_here = algorithm;
        }
      }
      const bool allreduce = id == 2;
      if (allreduce && size <= ranks && size > best_size) {
        best_size = size;
        chosen = algorithm_here;
      }
    }
  }
  std::string rest;
  EXPECT_FALSE(in >> rest) << "more than the rules: " << rest;
  return chosen;
}

// Only speed tells the rules apart, so only this test can: 2 ranks take
// recursive doubling (Open MPI's allreduce algorithm 3, not the ring's 4) at
// every size; from 3 ranks, 0 leaves the choice to Open MPI.
TEST(OpenMpiTuningTest, TheRulesChooseRecursiveDoublingForTwoRanksOnly) {
  const std::string rules = OpenMpiAllreduceRules();
  constexpr int kRecursiveDoubling = 3, kOpenMpisChoice = 0;
  for (const int64_t bytes : {int64_t{0}, int64_t{4}, int64_t{1} << 16,
                              int64_t{1} << 24, int64_t{1} << 30}) {
    SCOPED_TRACE(bytes);
    EXPECT_EQ(AllreduceAlgorithm(rules, 2, bytes), kRecursiveDoubling);
    EXPECT_EQ(AllreduceAlgorithm(rules, 3, bytes), kOpenMpisChoice);
    EXPECT_EQ(AllreduceAlgorithm(rules, 4, bytes), kOpenMpisChoice);
  }
  EXPECT_EQ(AllreduceAlgorithm(rules, 1, 4), -1);
}

}  // namespace
}  // namespace ringlab::comm
