#include "comm/cluster/link.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace ringlab::comm::cluster {
namespace {

TEST(LinkTest, RatesReadAsTcReadsThem) {
  EXPECT_EQ(ParseLink("1gbit", "").bits_per_second, 1000000000u);
  EXPECT_EQ(ParseLink("2.5gbit", "").bits_per_second, 2500000000u);
  EXPECT_EQ(ParseLink("100mbit", "").bits_per_second, 100000000u);
  EXPECT_EQ(ParseLink("1tbit", "").bits_per_second, 1000000000000u);
  EXPECT_TRUE(ParseLink("unlimited", "").unlimited());
  EXPECT_EQ(ParseLink("2.5gbit", "").Text(), "2.5gbit");
  EXPECT_EQ(ParseLink("100mbit", "").Text(), "100mbit");
  EXPECT_EQ(ParseLink("unlimited", "").Text(), "unlimited");
}

TEST(LinkTest, Latencies) {
  EXPECT_EQ(ParseLink("1gbit", "0").latency_us, 0u);
  EXPECT_EQ(ParseLink("1gbit", "2ms").latency_us, 2000u);
  EXPECT_EQ(ParseLink("1gbit", "50us").latency_us, 50u);
  EXPECT_EQ(ParseLink("1gbit", "2ms").Text(), "1gbit + 2ms");
  EXPECT_EQ(ParseLink("1gbit", "1500us").Text(), "1gbit + 1500us");
}

TEST(LinkTest, BadTextIsRefusedNamingTheFlag) {
  for (const char* rate :
       {"", "1", "gbit", "1gb", "1Gbit", "-1gbit", ".5gbit", "1..5gbit",
        "999kbit", "2tbit", "1e3mbit", "0gbit", " 1gbit"}) {
    try {
      ParseLink(rate, "");
      ADD_FAILURE() << "accepted '" << rate << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--link must be", 0), 0u) << rate;
    }
  }
  for (const char* latency : {"1", "1s", "0ms", "2000ms", "ms", "-1ms"}) {
    EXPECT_THROW(ParseLink("1gbit", latency), std::invalid_argument) << latency;
  }
}

// The bucket must hold a full 64 KiB GSO segment at every rate, and a
// millisecond of traffic at high rates (the qdisc's timer granularity).
TEST(LinkTest, TheBucketHoldsAMillisecondAndAtLeastASegment) {
  EXPECT_EQ(ParseLink("1mbit", "").BurstBytes(), 128u << 10);
  EXPECT_EQ(ParseLink("1gbit", "").BurstBytes(), 128u << 10);
  EXPECT_EQ(ParseLink("10gbit", "").BurstBytes(), 1250000u);
}

}  // namespace
}  // namespace ringlab::comm::cluster
