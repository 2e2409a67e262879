"""PyTorch's own process-group tests (torch.testing._internal.distributed.
distributed_test's _DistTestBase, as test/distributed/test_distributed_spawn.py
runs them with BACKEND=gloo), run at world size 2 either over gloo or with
ringlab in gloo's place: the module is told BACKEND=gloo, so it picks gloo's
cases and takes gloo's branches inside them, and every process group it asks
for as "gloo" is made as "ringlab". One line per case: "<case> <outcome>",
outcome passed, failed, skipped or error, then the failure's last line.

    suite_main.py --backend=gloo|ringlab [--cases=REGEX] [--out=FILE] [--record=FILE]

--record writes the names of the cases that passed, under a header naming torch's version:
over gloo, the gloo_passes.txt that suite_test.py holds ringlab to.
"""

import argparse
import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # expecttest.py

# Read by distributed_test at import, in this process and in every rank it spawns
# (they re-import this file as __mp_main__).
os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch_suite_"))

import torch.distributed as dist  # noqa: E402


def _in_ringlabs_place(backend):
    return "ringlab" if str(backend).lower() == "gloo" else backend


if os.environ.get("RINGLAB_SUITE_BACKEND") == "ringlab":
    import ringlab_torch  # noqa: F401  (registers "ringlab")
    from torch.distributed import distributed_c10d as c10d

    _init = dist.init_process_group
    _new_group = c10d.new_group

    def init_process_group(backend=None, *args, **kwargs):
        return _init(_in_ringlabs_place(backend), *args, **kwargs)

    def new_group(ranks=None, timeout=c10d.default_pg_timeout, backend=None,
                  pg_options=None):
        return _new_group(ranks, timeout, _in_ringlabs_place(backend), pg_options)

    dist.init_process_group = c10d.init_process_group = init_process_group
    dist.new_group = c10d.new_group = new_group

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class Suite(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


class LineResult(unittest.TextTestResult):
    """Prints one line per case as it ends."""

    def __init__(self, stream, descriptions, verbosity):
        super().__init__(stream, descriptions, verbosity)
        self.lines = []

    def _line(self, test, outcome, detail=""):
        last = detail.strip().splitlines()[-1] if detail.strip() else ""
        line = f"{test._testMethodName} {outcome} {last}".rstrip()
        self.lines.append(line)
        print(line, flush=True)

    def addSuccess(self, test):  # noqa: N802
        self._line(test, "passed")

    def addFailure(self, test, err):  # noqa: N802
        self._line(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        self._line(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        self._line(test, "skipped", reason)

    def addExpectedFailure(self, test, err):  # noqa: N802
        self._line(test, "passed")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        self._line(test, "failed", "unexpected success")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("gloo", "ringlab"), required=True)
    parser.add_argument("--cases", default=".")
    parser.add_argument("--out")
    parser.add_argument("--record")
    args = parser.parse_args()
    os.environ["RINGLAB_SUITE_BACKEND"] = args.backend
    names = sorted(n for n in unittest.defaultTestLoader.getTestCaseNames(Suite)
                   if re.search(args.cases, n))
    suite = unittest.TestSuite(Suite(n) for n in names)
    start = time.time()
    runner = unittest.TextTestRunner(stream=open(os.devnull, "w"), resultclass=LineResult)
    result = runner.run(suite)
    print(f"# {len(names)} cases in {time.time() - start:.0f} s", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(result.lines) + "\n")
    if args.record:
        import datetime
        import torch
        with open(args.record, "w") as f:
            f.write(RECORD_HEADER.format(backend=args.backend, torch=torch.__version__,
                                         date=datetime.date.today()))
            f.writelines(line.split(" ")[0] + "\n" for line in result.lines
                         if line.split(" ")[1] == "passed")


RECORD_HEADER = """\
# The cases of torch.testing._internal.distributed.distributed_test's _DistTestBase that pass
# over {backend} at world size 2 on one host, CPU only, recorded by
#   PYTHONPATH=bazel-bin/torch_backend /usr/bin/python3 \\
#       torch_backend/torch_suite/suite_main.py --backend={backend} --record=FILE
# torch: {torch}
# recorded: {date}
"""


if __name__ == "__main__":
    main()
