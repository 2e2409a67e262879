// gloo: Gloo (Debian's libgloo), the library behind PyTorch's CPU process
// group, as a ringlab backend, so that ringlab's own rings are measured
// against what PyTorch itself uses and a training run can use Gloo's. Ranks
// find each other through the communicator's store (an adapter gives Gloo
// the store interface it expects) and connect a full mesh of TCP pairs, each
// rank listening on the address it reached the job's store from (its
// PeerInfo), so that a job spans hosts; Gloo's own allreduce (a ring for
// large buffers), broadcast, allgather and barrier do the work. Gloo does
// not notice ranks that disagree on count, op or root, so the front agrees
// on every call first (comm.check_calls). A peer that dies breaks its
// connections; the survivors name it from the peers' pids (ranks on other
// hosts are named as unreachable instead). Linking //comm/adapters:gloo
// registers "gloo".
#ifndef RINGLAB_COMM_ADAPTERS_GLOO_H_
#define RINGLAB_COMM_ADAPTERS_GLOO_H_

#endif  // RINGLAB_COMM_ADAPTERS_GLOO_H_
