// What the running kernel was built with, read from its configuration
// (/proc/config.gz, else /boot/config-<release>), so that a feature an
// emulated cluster needs and the kernel lacks (netem, for --link_latency) is
// refused at the edge, before any namespace is made, rather than halfway
// through building the hosts.
#ifndef RINGLAB_COMM_CLUSTER_KERNEL_CONFIG_H_
#define RINGLAB_COMM_CLUSTER_KERNEL_CONFIG_H_

#include <optional>
#include <string>

namespace ringlab::comm::cluster {

// The value of `option` (e.g. "CONFIG_NET_SCH_NETEM") in the configuration
// `text`: "y", "m", a string's value, or "" when it is not set; nothing
// when the text holds no configuration.
std::optional<std::string> KernelOption(const std::string& text,
                                        const std::string& option);

// The running kernel's configuration text; nothing when it cannot be read.
std::optional<std::string> RunningKernelConfig();

// Whether the running kernel has the netem queueing discipline: built in,
// or a module that is loaded or installed; false when its configuration
// leaves it unset; nothing when that cannot be told (no configuration, or a
// module neither loaded nor installed here): the hosts' setup then says so
// if it fails.
std::optional<bool> KernelHasNetem();

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_KERNEL_CONFIG_H_
