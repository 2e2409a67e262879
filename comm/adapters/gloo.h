// gloo: a Communicator over Gloo (Debian's libgloo), the library behind
// PyTorch's CPU process group, so that ringlab's own rings are measured
// against what PyTorch itself uses and a training run can use Gloo's.
// Ranks find each other through ringlab's store (an adapter gives Gloo the
// store interface it expects) and connect a full mesh of TCP pairs; Gloo's
// own allreduce (a ring for large buffers), broadcast and barrier do the
// work. As for mpi, every call first agrees on its description across ranks
// (one small allreduce), because Gloo itself does not notice ranks that
// disagree on count, op or root. A peer that dies breaks its connections; the
// survivors name it from the pids the ranks publish when they join (ranks on
// other hosts are named as unreachable instead).
#ifndef RINGLAB_COMM_ADAPTERS_GLOO_H_
#define RINGLAB_COMM_ADAPTERS_GLOO_H_

#include <memory>

#include "comm/communicator.h"

namespace ringlab::comm {

// Collective over the store in context (required). Gloo's TCP pairs listen
// on 127.0.0.1 unless options.gloo_address names another local address.
std::unique_ptr<Communicator> CreateGlooCommunicator(
    const RankContext& context, const CommOptions& options);

}  // namespace ringlab::comm

#endif  // RINGLAB_COMM_ADAPTERS_GLOO_H_
