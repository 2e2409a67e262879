// What a finished multi-process job left behind, for the tests' leak checks:
// processes still running under the test, ringlab shared-memory segments
// (memfds) the test process still holds, TCP ports it still listens on. A
// segment lives exactly as long as some process holds it open or mapped, and
// every process a job starts descends from the test (orphans are adopted, see
// AdoptOrphans), so these checks see every leak a job can make.
#ifndef RINGLAB_COMM_TESTING_LEFTOVERS_H_
#define RINGLAB_COMM_TESTING_LEFTOVERS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace ringlab::comm::testing {

// Makes this process the reaper of its descendants' orphans (Linux's child
// subreaper), so that a grandchild outliving its parent stays visible here.
void AdoptOrphans();

// One line per leftover, empty when the job left nothing: descendants still
// running after a grace of up to `grace_ms` (zombies are reaped), ringlab
// memfds in this process's fds or mappings, listening TCP sockets it owns.
// Processes reported are killed, so that one leak does not fail every later
// test. Children in `expected` (the test's own helpers) are left alone.
std::vector<std::string> Leftovers(int grace_ms = 2000,
                                   const std::vector<pid_t>& expected = {});

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_LEFTOVERS_H_
