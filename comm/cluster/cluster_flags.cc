#include "comm/cluster/cluster_flags.h"

DEFINE_int32(hosts, 1,
             "emulated hosts to spread the ranks over, contiguously: network "
             "namespaces with names and addresses of their own, joined "
             "through one switch (needs root or unprivileged user "
             "namespaces, and iproute2)");
DEFINE_string(link, "unlimited",
              "the rate of every emulated host's link to the switch, in both "
              "directions, in tc's units (1gbit, 2.5gbit, 10gbit, 100mbit) "
              "or unlimited");
DEFINE_string(link_latency, "",
              "a delay on every host's link, each way (e.g. 50us, 2ms; a "
              "host-to-host path crosses two links); needs the kernel's "
              "netem");

namespace ringlab::comm::cluster {

ClusterRequest ClusterRequestFromFlags() {
  return {FLAGS_hosts, FLAGS_link, FLAGS_link_latency};
}

bool ClusterRequested() {
  const ClusterRequest defaults;
  return FLAGS_hosts != defaults.hosts || FLAGS_link != defaults.link ||
         FLAGS_link_latency != defaults.link_latency;
}

}  // namespace ringlab::comm::cluster
