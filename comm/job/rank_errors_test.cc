#include "comm/job/rank_errors.h"

#include <string>

#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

TEST(RankErrorsTest, OneBadInputFoundByEveryRankIsOneLastLine) {
  RankErrors errors;
  for (int rank : {2, 0, 1}) {
    EXPECT_TRUE(
        errors.Hold(rank, "error: labels.idx: label 12 is not below 10\n"));
  }
  EXPECT_FALSE(errors.Hold(0, "step 3 loss 0.5\n"));  // not an error: passed on
  JobEnd end;
  end.failed_rank = 0;
  end.failure = "error: rank 0 exited with status 2";
  EXPECT_EQ(errors.Report(end),
            "error: rank 2: labels.idx: label 12 is not below 10 (and 2 ranks "
            "reported the same)\n");
}

TEST(RankErrorsTest, ASignalDeathIsTheLastLineAndTheSurvivorsAreEchoed) {
  RankErrors errors;
  errors.Hold(0, "error: gloo: rank 1 exited during AllReduce\n");
  errors.Hold(2, "error: gloo: rank 1 exited during AllReduce\n");
  JobEnd end;
  end.failed_rank = 1;
  end.signaled = true;
  end.failure = "error: rank 1 killed by signal 9 (Killed)";
  EXPECT_EQ(errors.Report(end),
            "[rank 0] error: gloo: rank 1 exited during AllReduce (and 1 rank "
            "reported the same)\n"
            "error: rank 1 killed by signal 9 (Killed)\n");
}

TEST(RankErrorsTest, AStoppedRankIsBlamedWithWhatItsPeerSaid) {
  RankErrors errors;
  errors.Hold(0, "error: shm_ring: timed out waiting for rank 1\n");
  JobEnd end;
  end.failed_rank = 0;
  end.failure = "error: rank 0 exited with status 1";
  end.stopped_rank = 1;
  EXPECT_EQ(errors.Report(end),
            "error: rank 1 is stopped (SIGSTOP or Ctrl-Z), and its peers gave "
            "up on it: rank 0: shm_ring: timed out waiting for rank 1\n");
}

TEST(RankErrorsTest, AFailureWithoutAnErrorLineKeepsTheLaunchersLine) {
  RankErrors errors;
  errors.Hold(0, "error: rank 1 left\n");
  JobEnd end;
  end.failed_rank = 1;
  end.failure = "error: rank 1 exited with status 3";
  EXPECT_EQ(errors.Report(end),
            "[rank 0] error: rank 1 left\n"
            "error: rank 1 exited with status 3\n");
  EXPECT_EQ(RankErrors().Report(JobEnd{}), "");  // a job that ended well
}

TEST(RankErrorsTest, WhatIsHeldIsBounded) {
  RankErrors errors;
  int held = 0;
  for (int i = 0; i < 5000; ++i) {
    held += errors.Hold(0, "error: number " + std::to_string(i) + "\n");
  }
  EXPECT_EQ(held, 64);  // distinct texts; the rest pass through as they come
  EXPECT_TRUE(errors.Hold(1, "error: number 3\n"));  // a repeat is counted
  const std::string long_line = "error: " + std::string(100000, 'x') + "\n";
  RankErrors fresh;
  EXPECT_TRUE(fresh.Hold(0, long_line));
  EXPECT_LT(fresh.Report(JobEnd{}).size(), 5000u);
}

}  // namespace
}  // namespace ringlab::comm
