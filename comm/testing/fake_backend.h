// For tests of what sits above a communicator (the trainer's synchronisers,
// DDP's bucket reducer): a Communicator over a backend the test writes
// itself, e.g. one that simulates the other rank, with a host-memory,
// float32, sum/avg description that nothing registers.
#ifndef RINGLAB_COMM_TESTING_FAKE_BACKEND_H_
#define RINGLAB_COMM_TESTING_FAKE_BACKEND_H_

#include <memory>
#include <utility>

#include "comm/backend.h"
#include "comm/communicator.h"

namespace ringlab::comm::testing {

inline const BackendDescription& FakeDescription() {
  static const BackendDescription* description = [] {
    auto* d = new BackendDescription;
    d->name = "fake";
    d->summary = "a test's own backend";
    d->needs_store = false;
    return d;
  }();
  return *description;
}

// Rank `rank` of `world_size` over `backend`; *raw (when given) points at the
// backend, which the communicator owns.
template <typename B>
std::unique_ptr<Communicator> CommunicatorOver(std::unique_ptr<B> backend,
                                               int rank, int world_size,
                                               B** raw = nullptr) {
  if (raw != nullptr) *raw = backend.get();
  return std::make_unique<Communicator>(std::move(backend), FakeDescription(),
                                        rank, world_size);
}

}  // namespace ringlab::comm::testing

#endif  // RINGLAB_COMM_TESTING_FAKE_BACKEND_H_
