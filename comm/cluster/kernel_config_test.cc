// A kernel option read as the configuration states it: built in, a module,
// not set, or no configuration at all.
#include "comm/cluster/kernel_config.h"

#include "gtest/gtest.h"

namespace ringlab::comm::cluster {
namespace {

TEST(KernelConfigTest, AnOptionIsReadAsTheConfigurationStatesIt) {
  const std::string text =
      "# Automatically generated file; DO NOT EDIT.\n"
      "CONFIG_NET_SCH_HTB=y\n"
      "CONFIG_NET_SCH_TBF=m\n"
      "# CONFIG_NET_SCH_NETEM is not set\n"
      "CONFIG_DEFAULT_HOSTNAME=\"(none)\"\n";
  EXPECT_EQ(KernelOption(text, "CONFIG_NET_SCH_HTB"), "y");
  EXPECT_EQ(KernelOption(text, "CONFIG_NET_SCH_TBF"), "m");
  EXPECT_EQ(KernelOption(text, "CONFIG_NET_SCH_NETEM"), "");
  EXPECT_EQ(KernelOption(text, "CONFIG_NET_SCH"), "");  // a prefix is none
  EXPECT_EQ(KernelOption(text, "CONFIG_DEFAULT_HOSTNAME"), "\"(none)\"");
  EXPECT_EQ(KernelOption("not a configuration\n", "CONFIG_NET_SCH_HTB"),
            std::nullopt);
}

// Where this kernel's configuration can be read, the answer agrees with it.
TEST(KernelConfigTest, NetemFollowsTheRunningKernelsConfiguration) {
  const std::optional<std::string> config = RunningKernelConfig();
  if (!config) GTEST_SKIP() << "this kernel's configuration cannot be read";
  const std::optional<bool> netem = KernelHasNetem();
  ASSERT_TRUE(netem.has_value());
  if (KernelOption(*config, "CONFIG_NET_SCH_NETEM") == "y") {
    EXPECT_TRUE(*netem);
  }
  if (KernelOption(*config, "CONFIG_NET_SCH_NETEM") == "") {
    EXPECT_FALSE(*netem);
  }
}

}  // namespace
}  // namespace ringlab::comm::cluster
