// A CPU-time limit on this process, for a straggler that is a slower machine
// rather than one that waits: the process moves into a cgroup of its own whose
// CFS quota allows it `cpus` CPUs' time (cgroup v1's cpu controller, or v2's
// cpu.max): 1 ms, the least the kernel takes, every 1 / cpus ms, short enough
// to throttle within a step. All its threads, compute and communication
// alike, are held to that share, as on a slower CPU; a rank that spends less
// than its share between waits is not slowed at all. Making a cgroup needs
// write access to the cpu hierarchy (root, here); Unavailable() says why not
// before any rank starts.
#ifndef RINGLAB_TRAIN_CPU_QUOTA_H_
#define RINGLAB_TRAIN_CPU_QUOTA_H_

#include <string>

namespace ringlab::train {

// The directory of this process's cgroup in the cpu controller's hierarchy
// (cgroup v1's cpu, or v2's unified one), where a CpuQuota makes its own; ""
// where neither is mounted under /sys/fs/cgroup.
std::string CpuCgroupDir();

class CpuQuota {
 public:
  // "" where this process may hold itself to `cpus` CPUs (it makes such a
  // cgroup, enters it and leaves it to find out), else why not, in one line.
  static std::string Unavailable(double cpus);

  // Moves this process into a new cgroup allowed `cpus` (in [0.01, 1]) CPUs'
  // time; throws std::runtime_error where it cannot.
  explicit CpuQuota(double cpus);
  // Moves the process back to the cgroup it came from and removes its own (a
  // process killed inside leaves it; the next CpuQuota removes it).
  ~CpuQuota();
  CpuQuota(const CpuQuota&) = delete;
  CpuQuota& operator=(const CpuQuota&) = delete;

 private:
  std::string home_;  // the cgroup the process came from
  std::string own_;   // the cgroup made for it
};

}  // namespace ringlab::train

#endif  // RINGLAB_TRAIN_CPU_QUOTA_H_
