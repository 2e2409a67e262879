#!/usr/bin/python3
"""One implementation of every synchroniser: ringlab's trainer and the Fashion-MNIST MLP written
in plain PyTorch trained through ringlab_torch.Synchronizer (pytorch_ddp.py --front=ringlab), for
every synchroniser `train --list_syncs=json` lists, under the options its description gives for a
short run, at 2 and 4 ranks (shm_ring on both sides), from the same seed on the same first
--train_subset images. Every training loss of every rank must be the same float32 value, rank 0's
final parameters the same bits, each evaluation's test accuracy the same: 0 ulp, since both run
the same C++ synchroniser over the same collectives, and torch's forward and backward of this MLP
are ringlab's (docs/pytorch-fidelity.md). The test loss is summed differently (see
pytorch_sync_match.py), so within 1e-6 relative.

    pytorch_front_match.py --train PATH --ringlab_torch DIR [--only SYNC,...] [--ranks 2,4]

Prints one line per run and exits 0 when all match, 1 when one does not, 77 when torch does not
import or the data set is not installed (the test then skips).
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # experiments/: the kit's error line

import cli_errors  # noqa: E402
from pytorch_sync_match import (COMMON, PYTORCH_TIMEOUT_S, compare, read_run, run,  # noqa: E402
                                run_pytorch, why_skipped)

EPOCHS = 1  # with the short-run options: outer steps, averages, compressed steps (13 steps at 4 ranks)


def registered_syncs(train):
    """The trainer's synchronisers: [(name, {option: value} for a short run)]."""
    listed = json.loads(run([train, "--list_syncs=json"], "train --list_syncs=json"))
    return [(entry["name"], entry.get("short_run", {})) for entry in listed]


def same_final(ringlab_dir, torch_dir):
    """'' when rank 0's final parameters are the same bits on both sides."""
    import numpy as np
    names = sorted(os.listdir(os.path.join(ringlab_dir, "final")))
    if names != sorted(os.listdir(os.path.join(torch_dir, "final"))):
        return f"final/ holds {names} against {os.listdir(os.path.join(torch_dir, 'final'))}"
    for name in names:
        a = np.load(os.path.join(ringlab_dir, "final", name))
        b = np.load(os.path.join(torch_dir, "final", name))
        if a.shape != b.shape or a.tobytes() != b.tobytes():
            return f"final/{name} differs"
    return ""


def match(args, sync, options, ranks, tmp):
    """'' when the two runs of `sync` at `ranks` ranks ended alike, else what differs."""
    common = [c for c in COMMON if not c.startswith("--epochs")] + [
        f"--epochs={EPOCHS}", f"--train_subset={args.train_subset}", f"--sync={sync}"]
    ringlab_dir = os.path.join(tmp, f"{sync}_{ranks}", "ringlab")
    torch_dir = os.path.join(tmp, f"{sync}_{ranks}", "pytorch")
    run([args.train, "--dataset=fashion_mnist", "--comm=shm_ring", f"--nprocs={ranks}",
         f"--out_dir={ringlab_dir}"] + common + [f"--{k}={v}" for k, v in options.items()],
        f"ringlab --sync={sync}")
    run_pytorch(["/usr/bin/python3", os.path.join(HERE, "pytorch_ddp.py"), "--front=ringlab",
                 f"--ringlab_torch={args.ringlab_torch}", f"--world_size={ranks}",
                 f"--timeout={PYTORCH_TIMEOUT_S}", f"--out_dir={torch_dir}"] + common +
                [f"--sync_option={k}={v}" for k, v in options.items()],
                f"ringlab_torch --sync={sync}")
    return (compare(read_run(ringlab_dir), read_run(torch_dir)) or
            same_final(ringlab_dir, torch_dir))


def main():
    parser = cli_errors.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--ringlab_torch", required=True,
                        help="the directory holding ringlab_torch.so")
    parser.add_argument("--only", type=lambda text: text.split(","), default=[],
                        help="comma-separated synchronisers (default: every one)")
    parser.add_argument("--ranks", type=lambda text: [int(r) for r in text.split(",")],
                        default=[2, 4], help="comma-separated world sizes")
    parser.add_argument("--train_subset", type=int, default=3200)
    args = parser.parse_args()
    cli_errors.executable("--train", args.train)
    cli_errors.int_in_range("--train_subset", args.train_subset, 1, 60000)
    for ranks in args.ranks:
        cli_errors.int_in_range("--ranks", ranks, 2, 8)
    args.ringlab_torch = os.path.abspath(args.ringlab_torch)
    why = why_skipped()
    if why:
        print(f"skipped: {why}")
        return 77
    syncs = registered_syncs(args.train)
    unknown = sorted(set(args.only) - {name for name, _ in syncs})
    if unknown:
        parser.error(f"--only: no synchroniser {', '.join(unknown)}")
    failed = 0
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        for sync, options in syncs:
            if args.only and sync not in args.only:
                continue
            for ranks in args.ranks:
                difference = match(args, sync, options, ranks, tmp)
                print(f"{sync} at {ranks} ranks: "
                      f"{'bit for bit' if not difference else 'FAIL: ' + difference}",
                      flush=True)
                failed += bool(difference)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
