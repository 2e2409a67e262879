// The link an emulated host reaches the switch by (`--link=RATE`,
// `--link_latency=`): its rate in tc's units (1gbit, 2.5gbit, 100mbit ...,
// powers of 1000 as tc reads them) or unlimited, and a one-way delay that
// needs the kernel's netem. Parsed once, at the edge; the token bucket that
// enforces the rate is sized here too, so that what `--link=10gbit` means
// is written in one place.
#ifndef RINGLAB_COMM_CLUSTER_LINK_H_
#define RINGLAB_COMM_CLUSTER_LINK_H_

#include <cstdint>
#include <string>

namespace ringlab::comm::cluster {

struct Link {
  uint64_t bits_per_second = 0;  // 0: unlimited (no qdisc at all)
  uint64_t latency_us = 0;       // one way, 0: none (no netem)

  bool unlimited() const { return bits_per_second == 0; }
  // "1gbit", "2.5gbit", "unlimited"; with " + 5ms" where there is a delay.
  std::string Text() const;
  // The token bucket's depth in bytes: a millisecond of the rate, at least
  // 128 KiB (a full GSO segment and the timer's slack, so the bucket never
  // throttles below its rate; 0.95 Gbit/s measured at 1gbit).
  uint64_t BurstBytes() const;
};

// "unlimited", or a positive decimal and kbit/mbit/gbit/tbit, between
// 1 mbit and 1 tbit; latency "" or "0", or a decimal and us/ms (at most 1 s).
// Throws std::invalid_argument naming the flag.
Link ParseLink(const std::string& rate, const std::string& latency);

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_LINK_H_
