"""What a user's training script imports to be compared by `compare` (compare.py): three lines.

    import ringlab_compare
    model, optimizer = ringlab_compare.wrap(model, optimizer)   # after building both
    ...
        ringlab_compare.log(loss.item(), metric=None)           # once per step

Under compare, wrap() joins the process group the launcher describes (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) and puts the synchroniser compare names in the environment
(RINGLAB_COMPARE_SYNC) between the loop and its optimiser: ringlab's through
ringlab_torch.Synchronizer (its options from RINGLAB_COMPARE_OPTIONS, NAME=VALUE,...), whose
step runs where the loop calls optimizer.step(); or, for `pytorch_ddp`, the model wrapped in
DistributedDataParallel over gloo. Everything else of the optimiser (zero_grad, param_groups, a
scheduler made on it before wrap) is the loop's own. before_step, when given, runs between the
synchronised gradients and the optimiser's step: where a DDP loop clips. log() appends the
step's loss (and the metric, when given: an evaluation such as validation loss or accuracy),
the rank's seconds since wrap() and the bytes its synchroniser sent to RINGLAB_COMPARE_OUT.
Without compare's environment, wrap() returns the model and the optimiser as they are and log()
does nothing: the script runs alone as before.
"""

import datetime
import json
import math
import os
import time

SYNC_VARIABLE = "RINGLAB_COMPARE_SYNC"
OPTIONS_VARIABLE = "RINGLAB_COMPARE_OPTIONS"
OUT_VARIABLE = "RINGLAB_COMPARE_OUT"
TIMEOUT_VARIABLE = "RINGLAB_COMPARE_TIMEOUT"  # seconds any wait between ranks may take
PYTORCH_DDP = "pytorch_ddp"
LOG_HEADER = "step,wall_s,loss,metric,bytes_sent\n"

_state = {}


class SynchronisedOptimizer:
    """The loop's optimiser, whose step() is the synchroniser's (which steps the optimiser)."""

    def __init__(self, optimizer, sync, before_step):
        self.optimizer, self.sync, self.before_step = optimizer, sync, before_step

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("ringlab_compare: optimizer.step(closure) is not supported")
        if self.sync is None:  # PyTorch DDP: the gradients are averaged by now
            if self.before_step is not None:
                self.before_step()
            return self.optimizer.step()
        return self.sync.step(before_optimizer=self.before_step)

    @property
    def bytes_sent(self):
        return None if self.sync is None else self.sync.bytes_sent

    def __getattr__(self, name):
        return getattr(self.optimizer, name)


def _options(text):
    options = {}
    for item in filter(None, text.split(",")):
        name, _, value = item.partition("=")
        options[name] = value
    return options


def wrap(model, optimizer, before_step=None):
    """(the model to run forward on, the optimiser whose step() synchronises and steps)."""
    if before_step is not None and not callable(before_step):
        raise TypeError("ringlab_compare.wrap: before_step must be a function (lambda: ...), "
                        f"not {type(before_step).__name__}")
    sync_name = os.environ.get(SYNC_VARIABLE)
    if not sync_name:
        return model, optimizer
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=float(os.environ.get(TIMEOUT_VARIABLE, 120)))
    if sync_name == PYTORCH_DDP:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
        forward = torch.nn.parallel.DistributedDataParallel(model)
        synchronised = SynchronisedOptimizer(optimizer, None, before_step)
    else:
        import ringlab_torch  # registers the backend
        dist.init_process_group("ringlab", rank=rank, world_size=world, timeout=timeout)
        options = _options(os.environ.get(OPTIONS_VARIABLE, ""))
        sync = ringlab_torch.Synchronizer(model, optimizer, sync_name, **options)
        forward, synchronised = model, SynchronisedOptimizer(optimizer, sync, before_step)
    out = os.environ[OUT_VARIABLE]
    if rank == 0:  # what the report needs of the model: PyTorch DDP's bytes per step
        with open(os.path.join(out, "model.json"), "w") as f:
            json.dump({"parameters": sum(p.numel() for p in model.parameters()
                                         if p.requires_grad),
                       "world_size": world}, f)
    path = os.path.join(out, f"log_rank{rank}.csv")
    with open(path, "w") as f:
        f.write(LOG_HEADER)
    _state.update(optimizer=synchronised, path=path, start=time.perf_counter(), step=0,
                  sent=synchronised.bytes_sent or 0)
    return forward, synchronised


def log(loss, metric=None):
    """Records this step's loss (and metric) on this rank: its seconds since wrap() and the
    bytes the synchroniser sent so far (since wrap(): the start-up's broadcast is no step's)."""
    if not _state:
        return
    sent = _state["optimizer"].bytes_sent
    sent = "nan" if sent is None else sent - _state["sent"]
    wall = time.perf_counter() - _state["start"]
    metric_text = "nan" if metric is None else repr(float(metric))
    with open(_state["path"], "a") as f:
        f.write(f"{_state['step']},{wall:.6f},{float(loss)!r},{metric_text},{sent}\n")
    _state["step"] += 1
    if not math.isfinite(float(loss)):
        raise FloatingPointError(f"the loss is {loss} at step {_state['step'] - 1}")
