// What a test checks after a job on emulated hosts: that no network
// namespace it made is still held, by a process inside it or by an open
// descriptor (namespaces are held by nothing else here: none is mounted).
#ifndef RINGLAB_COMM_CLUSTER_NAMESPACES_IN_USE_H_
#define RINGLAB_COMM_CLUSTER_NAMESPACES_IN_USE_H_

#include <sys/types.h>

#include <set>

namespace ringlab::comm::cluster {

// Every network namespace some process holds, by inode.
std::set<ino_t> NetworkNamespacesInUse();

}  // namespace ringlab::comm::cluster

#endif  // RINGLAB_COMM_CLUSTER_NAMESPACES_IN_USE_H_
