#include "comm/rendezvous.h"

#include <cstdlib>

#include "comm/shm_ring.h"
#include "gtest/gtest.h"

namespace ringlab::comm {
namespace {

using std::chrono::milliseconds;

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v :
         {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
          "RINGLAB_STORE_HOSTED", "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
      unsetenv(v);
    }
  }
  // The message of the invalid_argument FromEnv throws, or "".
  std::string Error() {
    try {
      Rendezvous::FromEnv(milliseconds(500));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(RendezvousTest, LoneProcessGetsAPrivateStore) {
  EXPECT_FALSE(Rendezvous::InLaunchedJob());
  auto rv = Rendezvous::FromEnv(milliseconds(5000));
  EXPECT_EQ(rv->context().rank, 0);
  EXPECT_EQ(rv->context().world_size, 1);
  ASSERT_NE(rv->context().store, nullptr);
  rv->context().store->Set("k", "v");
  EXPECT_EQ(rv->context().store->Get("k", milliseconds(1000)), "v");
  // Every store-based backend works for one rank.
  auto comm = CreateCommunicator("shm_ring", rv->context(), CommOptions{});
  float x = 3;
  comm->AllReduce(&x, 1, ReduceOp::kAvg);
  EXPECT_EQ(x, 3);
}

// MASTER_PORT is a fixed number, as torchrun's: a port found free may be
// taken by a parallel test before rank 0 listens on it. Only that clash is
// retried, with another port, a few times.
std::unique_ptr<Rendezvous> RankZeroOnSomeFreePort() {
  for (int attempt = 0;; ++attempt) {
    int port;
    {
      TcpStoreServer probe;
      port = probe.port();
    }
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    try {
      return Rendezvous::FromEnv(milliseconds(5000));
    } catch (const std::exception& e) {
      const bool clash = std::string(e.what()).find("Address already in use") !=
                         std::string::npos;
      if (!clash || attempt == 4) throw;
    }
  }
}

TEST_F(RendezvousTest, RankZeroHostsTheStoreOnMasterPort) {
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  EXPECT_TRUE(Rendezvous::InLaunchedJob());
  auto rv0 = RankZeroOnSomeFreePort();
  EXPECT_EQ(rv0->context().local_rank, 0);
  setenv("RANK", "1", 1);
  setenv("LOCAL_RANK", "1", 1);
  auto rv1 = Rendezvous::FromEnv(milliseconds(5000));
  EXPECT_EQ(rv1->context().rank, 1);
  rv0->context().store->Set("from0", "x");
  EXPECT_EQ(rv1->context().store->Get("from0", milliseconds(1000)), "x");
}

TEST_F(RendezvousTest, MpirunVariablesWithoutAStore) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  auto rv = Rendezvous::FromEnv(milliseconds(500));
  EXPECT_EQ(rv->context().rank, 1);
  EXPECT_EQ(rv->context().world_size, 4);
  EXPECT_EQ(rv->context().store, nullptr);
}

TEST_F(RendezvousTest, MalformedVariablesAreNamed) {
  setenv("RANK", "0", 1);
  EXPECT_NE(Error().find("RANK and WORLD_SIZE"), std::string::npos);
  setenv("WORLD_SIZE", "two", 1);
  EXPECT_NE(Error().find("WORLD_SIZE='two'"), std::string::npos);
  setenv("WORLD_SIZE", "0", 1);
  EXPECT_NE(Error().find("WORLD_SIZE='0'"), std::string::npos);
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_NE(Error().find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  setenv("RANK", "-1", 1);
  EXPECT_NE(Error().find("RANK='-1'"), std::string::npos);
  setenv("RANK", "1", 1);
  setenv("MASTER_PORT", "99999", 1);
  EXPECT_NE(Error().find("MASTER_PORT='99999'"), std::string::npos);
  setenv("MASTER_PORT", "12x", 1);
  EXPECT_NE(Error().find("MASTER_PORT='12x'"), std::string::npos);
}

}  // namespace
}  // namespace ringlab::comm
