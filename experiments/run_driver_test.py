"""Tests of run_driver.execute: what a run's environment holds, and its deadline."""

import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_driver  # noqa: E402


class ExecuteTest(unittest.TestCase):
    def run_shell(self, script, deadline_s=30):
        log = os.path.join(tempfile.mkdtemp(), "log.txt")
        status, wall = run_driver.execute(["/bin/sh", "-c", script], deadline_s, log)
        with open(log) as f:
            return status, wall, f.read().splitlines()

    @mock.patch.dict(os.environ)
    def test_a_run_keeps_the_memory_it_frees(self):
        os.environ.pop("GLIBC_TUNABLES", None)
        status, _, lines = self.run_shell('echo "$GLIBC_TUNABLES"')
        self.assertEqual(status, "ok")
        self.assertEqual(lines[-1], run_driver.MALLOC_KEEP)

    @mock.patch.dict(os.environ, GLIBC_TUNABLES="glibc.malloc.arena_max=1")
    def test_the_callers_tunables_win(self):
        _, _, lines = self.run_shell('echo "$GLIBC_TUNABLES"')
        self.assertEqual(lines[-1], "glibc.malloc.arena_max=1")

    @mock.patch.dict(os.environ)
    def test_glibc_reads_the_tunables(self):
        # glibc ignores a misspelt tunable silently, so check the effect: a 1 MiB block comes
        # from the heap (below the program break) when kept, from a mapping of its own (above
        # it) by default.
        script = ("/usr/bin/python3 -c 'import ctypes; c = ctypes.CDLL(None); "
                  "c.malloc.restype = ctypes.c_void_p; c.sbrk.restype = ctypes.c_void_p; "
                  "p = c.malloc(1 << 20); print(int(p < c.sbrk(0)))'")
        os.environ.pop("GLIBC_TUNABLES", None)
        status, _, lines = self.run_shell(script)
        self.assertEqual(status, "ok", lines)
        self.assertEqual(lines[-1], "1")
        os.environ["GLIBC_TUNABLES"] = ""  # glibc's defaults
        _, _, lines = self.run_shell(script)
        self.assertEqual(lines[-1], "0")

    def test_a_run_past_its_deadline_is_killed(self):
        status, wall, _ = self.run_shell("sleep 30", deadline_s=0.5)
        self.assertTrue(status.startswith("failed: no result after"), status)
        self.assertLess(wall, 20)

    def test_a_failing_run_gives_its_error_line(self):
        status, _, _ = self.run_shell("echo 'error: bad flag'; exit 2")
        self.assertEqual(status, "failed: bad flag")


if __name__ == "__main__":
    unittest.main()
