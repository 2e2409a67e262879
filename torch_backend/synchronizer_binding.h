// ringlab_torch.Synchronizer: ringlab's synchronisers from any PyTorch
// training loop.
//
//   sync = ringlab_torch.Synchronizer(model, optimizer, "diloco",
//                                     inner_steps=16)
//   ...
//   loss.backward()
//   sync.step()            # in place of optimizer.step()
//
// Over the default process group, which must be ringlab's
// (init_process_group("ringlab")). At construction every rank's model is
// compared (names and shapes), the options are checked against the
// synchroniser's declarations (sync/), the parameters move into one flat
// buffer in a communicator of the synchroniser's own (each parameter and its
// .grad become views of it), rank 0's values go to every rank, and a hook on
// each parameter's gradient accumulator tells the synchroniser, during
// backward, which gradients are final: DDP's buckets go out as they
// complete. The C++ that runs is the trainer's (torch_synchronizer.h).
#ifndef RINGLAB_TORCH_BACKEND_SYNCHRONIZER_BINDING_H_
#define RINGLAB_TORCH_BACKEND_SYNCHRONIZER_BINDING_H_

#include <pybind11/pybind11.h>

namespace ringlab::torch_backend {

// Adds Synchronizer and syncs() (the registered synchronisers' descriptions)
// to the module.
void BindSynchronizer(pybind11::module_& module);

}  // namespace ringlab::torch_backend

#endif  // RINGLAB_TORCH_BACKEND_SYNCHRONIZER_BINDING_H_
