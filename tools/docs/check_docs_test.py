#!/usr/bin/env python3
"""check_docs.py fails on what it guards: a planted broken link, a flag the
command does not have, a path that does not exist, and a backend or variable
missing from the backends page, an included block that is not its file; and passes a tree without them."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_docs.py")

# A stand-in for //train:train: its --help as gflags and DescribeBackends
# print it.
TRAIN_HELP = """\
train: trains

backends in this binary (--comm):
  shm_ring: a ring over shared memory (host memory, one host)
      RINGLAB_SHM_CHUNK_BYTES [4096, 67108864]: the ring's chunk
{extra}
  Flags from train/train_main.cc:
    -epochs (epochs) type: int64 default: 10
    -lr (learning rate) type: double default: 0.01
"""

README = """\
<!-- flags: //train:train -->
# kit

See [the trainer](docs/trainer.md) and [backends](docs/backends.md). Train with `--epochs=3`.

```sh
bazel run -c opt //train:train -- --lr=0.1 --epochs=2
```

Its source is `train/main.cc`, its target `//train:train`.
"""

TRAINER = "# The trainer\n\nBack to the [README](../README.md).\n"

BACKENDS = """\
# Backends

<!-- begin generated: backends -->
| backend | what it is | its variables |
|---|---|---|
| `shm_ring` | a ring | `RINGLAB_SHM_CHUNK_BYTES` [4096, 67108864]: the ring's chunk |
<!-- end generated: backends -->
"""


class CheckDocsTest(unittest.TestCase):
    def tree(self, readme=README, extra_backend=""):
        root = tempfile.mkdtemp()
        os.makedirs(os.path.join(root, "docs"))
        os.makedirs(os.path.join(root, "train"))
        for name, text in [("README.md", readme), ("docs/trainer.md", TRAINER),
                           ("docs/backends.md", BACKENDS), ("train/main.cc", ""),
                           ("train/BUILD", 'cc_binary(\n    name = "train",\n)\n')]:
            with open(os.path.join(root, name), "w") as f:
                f.write(text)
        train = os.path.join(root, "train", "train")
        with open(train, "w") as f:
            f.write("#!/bin/sh\ncat <<'HELP'\n" +
                    TRAIN_HELP.format(extra=extra_backend) + "HELP\n")
        os.chmod(train, 0o755)
        return root, train

    def check(self, root, train):
        result = subprocess.run(
            [sys.executable, CHECKER, "--root", root, "--backends_page",
             "docs/backends.md", "//train:train=" + train],
            capture_output=True, text=True)
        return result.returncode, result.stdout

    def test_a_tree_without_faults_passes(self):
        status, out = self.check(*self.tree())
        self.assertEqual(status, 0, out)

    def test_a_page_the_readme_does_not_link_fails(self):
        status, out = self.check(*self.tree(README.replace("[backends](docs/backends.md)",
                                                           "backends")))
        self.assertEqual(status, 1, out)
        self.assertIn("README.md: no link to docs/backends.md", out)

    def test_a_broken_link_fails(self):
        status, out = self.check(*self.tree(README.replace("docs/trainer.md",
                                                           "docs/trainr.md")))
        self.assertEqual(status, 1, out)
        self.assertIn("README.md:4: the link docs/trainr.md leads nowhere", out)

    def test_an_unknown_flag_fails_in_prose_and_in_a_command(self):
        status, out = self.check(*self.tree(README.replace("`--epochs=3`", "`--epoch=3`")))
        self.assertEqual(status, 1, out)
        self.assertIn("--epoch=3 is a flag of none of //train:train", out)
        status, out = self.check(*self.tree(README.replace("--lr=0.1", "--rate=0.1")))
        self.assertEqual(status, 1, out)
        self.assertIn("--rate=0.1 is not a flag of //train:train", out)

    def test_a_missing_path_or_target_fails(self):
        status, out = self.check(*self.tree(README.replace("train/main.cc", "train/man.cc")))
        self.assertIn("`train/man.cc` does not exist", out)
        status, out = self.check(*self.tree(README.replace("`//train:train`",
                                                           "`//train:trainer`")))
        self.assertEqual(status, 1, out)
        self.assertIn("no target //train:trainer", out)

    def test_an_included_block_must_be_its_file(self):
        block = "<!-- begin included: train/table.md -->\n| a |\n<!-- end included -->\n"
        root, train = self.tree(README + block)
        with open(os.path.join(root, "train", "table.md"), "w") as f:
            f.write("| a |\n")
        status, out = self.check(root, train)
        self.assertEqual(status, 0, out)
        with open(os.path.join(root, "train", "table.md"), "w") as f:
            f.write("| b |\n")
        status, out = self.check(root, train)
        self.assertEqual(status, 1, out)
        self.assertIn("the block included from train/table.md differs", out)

    def test_a_backend_missing_from_the_page_fails(self):
        warp = textwrap.indent("warp: a new backend (host memory, spans hosts)\n"
                               "    RINGLAB_WARP_SPEED [1, 9]: how fast", "  ")
        status, out = self.check(*self.tree(extra_backend=warp))
        self.assertEqual(status, 1, out)
        self.assertIn("the backends table has no row for warp", out)
        self.assertIn("the backends table lacks RINGLAB_WARP_SPEED", out)


if __name__ == "__main__":
    unittest.main()
