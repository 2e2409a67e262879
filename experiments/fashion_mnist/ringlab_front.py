"""pytorch_ddp.py --front=ringlab: ringlab's synchronisers from its plain PyTorch loop, through
ringlab_torch.Synchronizer (the trainer's own C++ over the model's parameters)."""

import os

import numpy as np

# Each synchroniser's bytes sent by the end of its last step.
_SENT_BEFORE = {}


def ringlab_synchronizer(model, optimizer, args):
    """--front=ringlab: ringlab's synchroniser --sync over the model, its options from
    --sync_option NAME=VALUE, through ringlab_torch.Synchronizer (the trainer's own C++)."""
    import ringlab_torch
    options = dict(option.split("=", 1) for option in args.sync_option)
    sync = ringlab_torch.Synchronizer(model, optimizer, args.sync, **options)
    _SENT_BEFORE[id(sync)] = sync.bytes_sent  # the start-up's broadcast is no step's
    return sync


class EvaluatedSwap:
    """Exchanges the model's parameters with the synchroniser's evaluated ones (DiLoCo's outer
    parameters) and back, for evaluation."""

    def __init__(self, torch, model, sync):
        self.torch, self.model, self.sync, self.own = torch, model, sync, None

    def __call__(self):
        with self.torch.no_grad():
            params = dict(self.model.named_parameters())
            if self.own is None:
                self.own = {name: p.detach().clone() for name, p in params.items()}
                for name, value in self.sync.evaluated_parameters().items():
                    params[name].copy_(value)
            else:
                for name, value in self.own.items():
                    params[name].copy_(value)
                self.own = None


def front_columns(sync):
    """losses.csv's comm_ms and bytes_sent of the step just taken, as the trainer counts them:
    the time in the synchroniser (the optimiser's step excluded) and the bytes its
    communicator sent in the step."""
    sent = sync.bytes_sent
    step_bytes = sent - _SENT_BEFORE.get(id(sync), sent)
    _SENT_BEFORE[id(sync)] = sent
    return f"{sync.last_sync_ms:.6f},{step_bytes}"


def save_final(sync, directory):
    """The run's parameters, as the trainer writes them: <state_dict name>.npy each."""
    os.makedirs(directory, exist_ok=True)
    for name, value in sync.evaluated_parameters().items():
        np.save(os.path.join(directory, f"{name}.npy"), value.numpy())
