#!/usr/bin/python3
"""The sync map's model and report on hand-made points (no training): the cost model's laws, its
prediction against figures worked by hand, the report's checks, and the driver's flags."""

import argparse
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import map_grid  # noqa: E402
import map_model  # noqa: E402
import map_report  # noqa: E402
import map_repeats  # noqa: E402
import run_driver  # noqa: E402
import sync_map  # noqa: E402

FITS = {"unlimited": (1e-4, 1e9), "1gbit": (1e-4, 1e8)}  # alpha s, B_eff bytes/s
TARGET = map_grid.MLP_TARGET  # 85% test accuracy, in epochs
# The figures worked by hand leave the emulator's token bucket out (no shaped link here lets a
# burst through), but for test_the_emulators_bucket_lets_a_burst_through, which works it in.
NO_BUCKET = mock.patch.object(map_model, "bucket_s", lambda link: 0.0)


def point(sync, link, ranks, bytes_per_step, walls, accuracies, events=1.0):
    return dict(sync=sync, link=link, ranks=ranks, bytes_per_step=bytes_per_step,
                events=events, flags={"lr": 0.1},
                evals=[dict(epoch=e + 1, test_accuracy=a, wall_s=w)
                       for e, (a, w) in enumerate(zip(accuracies, walls))])


class ModelTest(unittest.TestCase):
    def test_link_rates_and_steps(self):
        self.assertEqual(map_model.link_bits("2.5gbit"), 2.5e9)
        self.assertEqual(map_model.link_bits("100mbit"), 1e8)
        self.assertIsNone(map_model.link_bits("unlimited"))
        self.assertEqual(map_model.steps_per_epoch(2), 469)  # ceil(30000 / 64)
        self.assertEqual(map_model.steps_per_epoch(1024), 1)

    def test_the_law_follows_the_ratio_of_bytes(self):
        self.assertEqual(map_model.bytes_law({2: 100, 4: 150}), "allreduce")
        self.assertEqual(map_model.bytes_law({2: 100, 4: 290}), "allgather")
        self.assertEqual(map_model.bytes_law({2: 100}), "allreduce")
        ring = {"bytes": {2: 100.0}, "law": "allreduce"}
        gather = {"bytes": {2: 100.0}, "law": "allgather"}
        self.assertAlmostEqual(map_model.link_bytes(ring, 1024), 100 * 2 * 1023 / 1024)
        self.assertAlmostEqual(map_model.link_bytes(gather, 8), 700)

    def test_an_unswept_rate_takes_the_nearest_efficiency(self):
        alpha, b_eff = map_model.link_fit(FITS, "10gbit")
        self.assertEqual(alpha, 1e-4)
        self.assertAlmostEqual(b_eff, 1e9)  # 1gbit ran at 80%: 10 Gbit/s at 80% is 1e9 B/s
        self.assertIsNone(map_model.link_fit({"unlimited": (1e-4, 1e9)}, "10gbit"))
        # alpha: the median over the links, each link its own B_eff.
        fits = {"unlimited": (1e-3, 1e9), "10gbit": (2e-4, 9e8), "1gbit": (4e-4, 1e8)}
        self.assertEqual(map_model.link_fit(fits, "10gbit"), (4e-4, 9e8))

    def test_prediction_worked_by_hand(self):
        # 1 MB a step; on the unlimited link 2 epochs of 469 steps took 469 * 2 * 11.2 ms:
        # compute 11.2 ms - (2 alpha = 0.2 ms + 1 ms) = 10 ms. At 1gbit: 0.2 + 10 ms comm.
        walls = [469 * 0.0112, 469 * 2 * 0.0112]
        points = [point("allreduce", "unlimited", 2, 1e6, walls, [0.80, 0.86])]
        profiles = map_model.profiles(points, FITS, TARGET)
        self.assertAlmostEqual(profiles["allreduce"]["compute_ms"][2], 10.0)
        seconds, extrapolated = map_model.predict(profiles["allreduce"], FITS, "1gbit", 2)
        self.assertAlmostEqual(seconds, 2 * 469 * (0.010 + 0.0002 + 0.01))
        self.assertFalse(extrapolated)
        slow, _ = map_model.predict(profiles["allreduce"], FITS, "1gbit", 2, stretch=1.5)
        self.assertAlmostEqual(slow, 2 * 469 * (0.015 + 0.0002 + 0.01))
        seconds, extrapolated = map_model.predict(profiles["allreduce"], FITS, "1gbit", 8)
        self.assertTrue(extrapolated)
        self.assertAlmostEqual(seconds, 2 * 118 * (0.010 + 14 * 1e-4 + 1.75e6 / 1e8))

    @NO_BUCKET
    def test_compute_is_the_median_over_links_and_a_check_holds_its_run_out(self):
        # 1 MB a step: comm 1.2 ms on the unlimited link and at 10gbit (both 1e9 B/s), 10.2 ms
        # at 1gbit. Computes of 10, 12 and 30 ms: the median is 12 ms.
        points = [point("allreduce", link, 2, 1e6, [469 * s, 469 * 2 * s], [0.80, 0.86])
                  for link, s in (("unlimited", 0.0112), ("10gbit", 0.0132),
                                  ("1gbit", 0.0402))]
        profile = map_model.profiles(points, FITS, TARGET)["allreduce"]
        self.assertAlmostEqual(profile["compute_ms"][2], 12.0)
        # The 10gbit run held out: the median of 10 and 30 ms, 20 ms.
        rows = map_report.checks(points, FITS, TARGET)
        p, measured, (predicted, extrapolated), error = rows[1]
        self.assertEqual(p["link"], "10gbit")
        self.assertAlmostEqual(measured, 469 * 2 * 0.0132)
        self.assertAlmostEqual(predicted, 2 * 469 * (0.020 + 0.0012))
        self.assertFalse(extrapolated)
        self.assertAlmostEqual(error, (0.020 + 0.0012) / 0.0132 - 1)
        # A run alone at its rank count has no held-out prediction, though other rank counts
        # have compute: theirs would check the scaling, not the run.
        four = point("allreduce", "1gbit", 4, 1.5e6, [469, 938], [0.80, 0.86])
        rows = map_report.checks(points + [four], FITS, TARGET)
        self.assertEqual(rows[-1][2:], (None, None))
        self.assertIn("with a held-out prediction (1 more reached it with none",
                      "\n".join(map_report.point_lines(rows, map_report.point_rows(rows))))

    @NO_BUCKET
    def test_ddp_family_hides_a_window_fitted_on_the_slowest_link(self):
        # Per step, on the unlimited link and at 1gbit: allreduce (1 MB: comm 1.2 and 10.2 ms)
        # 11.2 and 17.2 ms, 4.2 ms of its 1gbit comm hidden; fp16 (0.5 MB: 0.7 and 5.2 ms) 11.0
        # and 13.0 ms, 3.2 ms hidden; int8 (0.25 MB: 2.7 ms at 1gbit) 3 ms longer there than
        # its comm, a bound (0) left out of the median. allreduce at 10gbit (1.2 ms, all
        # hidden) is not its slowest link. diloco sends after its step: no window of its own.
        def runs(sync, size, *link_steps):
            return [point(sync, link, 2, size, [469 * s, 469 * 2 * s], [0.80, 0.86])
                    for link, s in link_steps]
        points = (runs("allreduce", 1e6, ("unlimited", 0.0112), ("1gbit", 0.0172),
                       ("10gbit", 0.0112))
                  + runs("fp16", 5e5, ("unlimited", 0.0110), ("1gbit", 0.0130))
                  + runs("int8", 2.5e5, ("unlimited", 0.0110), ("1gbit", 0.0167))
                  + runs("diloco", 1e6, ("unlimited", 0.0112), ("1gbit", 0.0214)))
        family = frozenset({"allreduce", "fp16", "int8"})
        profiles = map_model.profiles(points, FITS, TARGET, overlapping=family)
        self.assertAlmostEqual(profiles["fp16"]["window_s"][2], 0.0037)  # median(4.2, 3.2)
        self.assertEqual(profiles["diloco"]["window_s"], {})
        # allreduce's comm on the unlimited link and at 10gbit hides whole: compute is the
        # step, 11.2 ms; at 1gbit 17.2 - (10.2 - 3.7) = 10.7 ms: the median 11.2 ms.
        self.assertAlmostEqual(profiles["allreduce"]["compute_ms"][2], 11.2)
        self.assertAlmostEqual(profiles["diloco"]["compute_ms"][2], 10.6)  # 10 and 11.2 ms
        seconds, _ = map_model.predict(profiles["allreduce"], FITS, "1gbit", 2)
        self.assertAlmostEqual(seconds, 2 * 469 * (0.0112 + 0.0102 - 0.0037))
        # A straggler's longer backward hides 1.5 times the window: 1.5 x 11.2 ms of compute,
        # 10.2 - 5.55 ms of comm exposed.
        slow, _ = map_model.predict(profiles["allreduce"], FITS, "1gbit", 2, stretch=1.5)
        self.assertAlmostEqual(slow, 2 * 469 * (1.5 * 0.0112 + 0.0102 - 1.5 * 0.0037))
        self.assertAlmostEqual(profiles["allreduce"]["window_s"][2], 0.0037)  # left as it was
        # Compute is half the step where 1 MB takes compute + window: 14.9 ms at 0.8 Gbit/s.
        self.assertAlmostEqual(map_model.utilisation_gbit(profiles["allreduce"], FITS, 2, 0.5),
                               8e6 / 0.0149 / 0.8 / 1e9)
        # A check of allreduce's 1gbit point fits the window without allreduce: fp16's 3.2 ms
        # (int8's bound left out again); its compute is 11.2 ms from its other links.
        rows = map_report.checks(points, FITS, TARGET, family)
        p, measured, (predicted, _), _ = rows[1]
        self.assertEqual((p["sync"], p["link"]), ("allreduce", "1gbit"))
        self.assertAlmostEqual(predicted, 2 * 469 * (0.0112 + 0.0102 - 0.0032))
        # The family's only member is checked with a window from its other points: at 10gbit,
        # now its slowest link, all 1.2 ms of its comm hid.
        alone = map_model.profiles(points[:3], FITS, TARGET, held_out=points[1],
                                   overlapping=family)
        self.assertAlmostEqual(alone["allreduce"]["window_s"][2], 0.0012)
        # Without the family nothing hides: compute 10 ms, the 1gbit step predicted 20.2 ms.
        rows = map_report.checks(points, FITS, TARGET)
        self.assertAlmostEqual(rows[1][2][0], 2 * 469 * (0.0100 + 0.0102))

    def test_the_emulators_bucket_lets_a_burst_through(self):
        fits = {"unlimited": (1e-4, 1e9), "100mbit": (1e-4, 1e7)}
        bucket = 131072 * 8 / 1e8  # 128 KiB at 100 Mbit/s: 10.49 ms
        self.assertAlmostEqual(map_model.bucket_s("100mbit"), bucket)
        self.assertAlmostEqual(map_model.bucket_s("10gbit"), 1e-3)  # 1.25 MB, a millisecond
        self.assertEqual(map_model.bucket_s("unlimited"), 0.0)
        # diloco sends 1 MB every 16 steps of 10 ms compute: 100 ms at 100mbit, less the
        # bucket, refilled over the 160 ms between; on the unlimited link 1 ms.
        def runs(sync, size, events, *link_steps):
            return [point(sync, link, 2, size, [469 * s, 469 * 2 * s], [0.80, 0.86], events)
                    for link, s in link_steps]
        shaped = 0.010 + (0.0002 + 0.100 - bucket) / 16
        points = runs("diloco", 62500, 1 / 16, ("unlimited", 0.010 + 0.0012 / 16),
                      ("100mbit", shaped))
        profile = map_model.profiles(points, fits, TARGET)["diloco"]
        self.assertAlmostEqual(profile["compute_ms"][2], 10.0)
        rows = map_report.checks(points, fits, TARGET)
        # The bucket saved 0.66 ms of the 16.26 ms a real link's step would take (4%): the
        # point still speaks for a real link of its rate.
        self.assertAlmostEqual(rows[1][0]["bucket_share"], 1 - shaped / (0.010 + 0.1002 / 16))
        self.assertEqual([r[3] is not None and abs(r[3]) < 1e-9 for r in rows], [True, True])
        self.assertAlmostEqual(rows[1][2][0], 2 * 469 * shaped)  # 100mbit, held out
        # On a real link of that rate the whole 100 ms is waited for.
        seconds, _ = map_model.predict(profile, fits, "100mbit", 2)
        self.assertAlmostEqual(seconds, 2 * 469 * (0.010 + 0.1002 / 16))
        # sparta sends 200 KB every step of 2 ms compute: 20 ms at 100mbit, of which the 2 ms
        # refill lets 2 ms through, so the step is the link's 20.2 ms whatever the compute
        # below the bucket's. That run measures no compute: the unlimited link's 2 ms stands.
        points = runs("sparta", 2e5, 1.0, ("unlimited", 0.002 + 0.0004), ("100mbit", 0.0202))
        profile = map_model.profiles(points, fits, TARGET)["sparta"]
        self.assertTrue(map_model.run_compute_s(0.0202, profile, fits, "100mbit", 2)[1])
        # 50 KB a step: 5 ms, within the bucket, yet longer than the 2 ms refill: paced too.
        self.assertTrue(map_model.run_compute_s(0.0052, dict(profile, bytes={2: 5e4}), fits,
                                                "100mbit", 2)[1])
        self.assertAlmostEqual(profile["compute_ms"][2], 2.0)
        seconds, _ = map_model.predict(profile, fits, "100mbit", 2, emulated=True)
        self.assertAlmostEqual(seconds, 2 * 469 * 0.0202)
        # DDP's family gets no credit: its window, 2.4 ms here, was measured on the shaped link
        # with the bucket in it.
        family = map_model.profiles(points, fits, TARGET, overlapping=frozenset({"sparta"}))
        self.assertAlmostEqual(family["sparta"]["window_s"][2], 0.0024)
        seconds, _ = map_model.predict(family["sparta"], fits, "100mbit", 2, emulated=True)
        self.assertAlmostEqual(seconds, 2 * 469 * 0.0202)
        # streaming_diloco's 100 KB every 8 steps of 2 ms fit the bucket, refilled over 16 ms:
        # the emulator hides the 10 ms a real link would add every 8 steps. Its point is within
        # 20%, but the bucket saved 38% of a real link's time: it validates no cell.
        points = runs("streaming_diloco", 12500, 1 / 8, ("unlimited", 0.002 + 0.0003 / 8),
                      ("100mbit", 0.002 + 0.0002 / 8))
        rows = map_report.checks(points, fits, TARGET)
        self.assertAlmostEqual(rows[1][3], 0.0)
        self.assertAlmostEqual(rows[1][0]["bucket_share"], 1 - 0.002025 / 0.003275)
        self.assertFalse(map_report.validated(rows, "1gbit", 2, fits))
        self.assertTrue(map_report.validated(rows[:1], "1gbit", 2, fits))  # unlimited: 10gbit

    def test_a_paced_run_is_told_apart_and_the_map_gives_no_credit(self):
        fits = {"unlimited": (1e-4, 1e9), "100mbit": (1e-4, 1e7)}
        bucket = 131072 * 8 / 1e8

        def compute_of(step, size, events, overlapping=frozenset()):
            run = point("sparta", "100mbit", 2, size, [469 * step, 938 * step], [0.8, 0.86],
                        events)
            profile = map_model.profiles([run], fits, TARGET, overlapping=overlapping)["sparta"]
            compute, paced = map_model.run_compute_s(step, profile, fits, "100mbit", 2)
            return (None if paced else compute), profile
        # 20 KB a step (2 ms) under 4 ms of compute: the compute paced it, not the link.
        self.assertAlmostEqual(compute_of(0.0042, 2e4, 1.0)[0], 0.004)
        # 2 MB every 16 steps of 10 ms: the 160 ms between refill the whole bucket.
        step = 0.010 + (0.0002 + 0.200 - bucket) / 16
        self.assertAlmostEqual(compute_of(step, 125000, 1 / 16)[0], 0.010)
        # 200 KB a step (20 ms): paced where the compute worked back is within 5% of the
        # bucket's 10.49 ms (a step 1% slower), not 20% past it.
        self.assertIsNone(compute_of(0.0202 * 1.01, 2e5, 1.0)[0])
        self.assertAlmostEqual(compute_of(0.0002 + 0.020 + 0.2 * bucket, 2e5, 1.0)[0],
                               1.2 * bucket)
        # Its only run paced, the profile takes the bound.
        _, profile = compute_of(0.0202, 2e5, 1.0)
        self.assertAlmostEqual(profile["compute_ms"][2], 1e3 * bucket)
        # DDP's family has no credit, so it is never paced that way: with no window fitted
        # (no unlimited run) its whole 20.2 ms is communication, and 10.49 ms is compute.
        compute, _ = compute_of(0.0202 + bucket, 2e5, 1.0, frozenset({"sparta"}))
        self.assertAlmostEqual(compute, bucket)
        # The map predicts a real link: the cell's time is the prediction without the credit.
        points = [point("streaming_diloco", link, 2, 12500, [469 * s, 938 * s], [0.8, 0.86],
                        1 / 8) for link, s in (("unlimited", 0.002 + 0.0003 / 8),
                                               ("100mbit", 0.002 + 0.0002 / 8))]
        profiles = map_model.profiles(points, fits, TARGET)
        cell = map_report.grid(profiles, fits)[("100mbit", 2)]
        real, _ = map_model.predict(profiles["streaming_diloco"], fits, "100mbit", 2)
        self.assertEqual(cell, [(real, "streaming_diloco")])
        self.assertAlmostEqual(real, 2 * 469 * 0.003275)
        rows = map_report.checks(points, fits, TARGET)
        lines = map_report.point_lines(rows, map_report.point_rows(rows))
        self.assertIn("validate no cell of the map: streaming_diloco at 100mbit, 2 ranks (38%).",
                      "\n".join(lines))

    def test_the_family_is_the_trainers(self):
        # The synchronisers with DDP's --overlap option, as train --list_syncs=json declares
        # them, but post_local_sgd (gradients only in its warm-up).
        train = os.environ.get("RINGLAB_TRAIN")
        if not train:
            self.skipTest("RINGLAB_TRAIN (the //train:train binary) not given")
        listed = json.loads(subprocess.run([train, "--list_syncs=json"], capture_output=True,
                                           text=True, timeout=120, check=True).stdout)
        family = {e["name"] for e in listed if "overlap" in {o["name"] for o in e["options"]}}
        self.assertEqual(family - {"post_local_sgd"}, map_grid.OVERLAPS_BACKWARD)
        self.assertEqual(map_grid.overlapping("char_lm"), {"allreduce", "fp16", "topk", "int8",
                                                           "ef_signsgd"})

    def test_an_unreached_target_predicts_nothing(self):
        points = [point("topk", "unlimited", 2, 1e4, [5, 10], [0.80, 0.84])]
        profiles = map_model.profiles(points, FITS, TARGET)
        self.assertIsNone(map_model.predict(profiles["topk"], FITS, "1gbit", 2))

    def test_a_loss_target_counts_steps(self):
        # Validation loss at steps 25 and 50; the target 2.0 is first met at step 50, after
        # 50 steps of 0.1 s. At 4 ranks the same steps (steps are the unit), bytes 1.5 times.
        evals = [dict(step=25, val_loss=2.3, wall_s=2.5), dict(step=50, val_loss=1.9,
                                                               wall_s=5.0)]
        target = map_grid.MODELS["char_lm"]["target"]
        self.assertEqual(map_model.first_reach(evals, target), (50, 5.0))
        self.assertIsNone(map_model.first_reach(evals[:1], target))
        lm = dict(sync="allreduce", link="unlimited", ranks=2, bytes_per_step=1e6, events=1.0,
                  evals=evals)
        profile = map_model.profiles([lm], FITS, target)["allreduce"]
        self.assertAlmostEqual(profile["compute_ms"][2], 100 - 0.2 - 1.0)
        seconds, _ = map_model.predict(profile, FITS, "1gbit", 4)
        self.assertAlmostEqual(seconds, 50 * (0.0988 + 6 * 1e-4 + 1.5e6 / 1e8))
        self.assertEqual(target.describe(), "val loss at most 2")

    def test_utilisation_worked_by_hand(self):
        profile = {"bytes": {2: 1e6}, "law": "allreduce", "events": 1.0,
                   "compute_ms": {2: 10.0}}
        # 50%: 1e6 B may take 10 ms at 80% efficiency; 99% at 1024 ranks: 2 * 1023 / 1024 MB
        # in 10 ms / 99.
        gbit = map_model.utilisation_gbit(profile, FITS, 2, 0.5)
        self.assertAlmostEqual(gbit, 1e6 * 8 / 0.010 / 0.8 / 1e9)
        gbit = map_model.utilisation_gbit(profile, FITS, 1024, 0.99)
        self.assertAlmostEqual(gbit, 2e6 * 1023 / 1024 * 8 / (0.010 / 99) / 0.8 / 1e9)


class ReportTest(unittest.TestCase):
    def test_winner_checks_and_validation(self):
        rows = [(point("a", "1gbit", 2, 1, [1], [1]), 10.0, (11.0, False), 0.1),
                (point("b", "1gbit", 2, 1, [1], [1]), 20.0, (9.0, False), -0.55)]
        self.assertEqual(map_report.winner_checks(map_report.point_rows(rows)),
                         [("1gbit", 2, "a", "b", 1.0)])
        self.assertFalse(map_report.validated(rows, "1gbit", 4))  # b is 55% off
        self.assertFalse(map_report.validated(rows[:1], "100gbit", 1024))  # nothing near
        self.assertTrue(map_report.validated(rows[:1], "10gbit", 4))

    def test_a_point_is_checked_by_its_runs_median(self):
        # Three runs of one point, 15, 8 and 10 s, against the prediction 11 s they share: run
        # by run two are more than 20% off (-27%, +37.5%); their median, 10 s, is 10% off.
        # Listed as they may be read, the first run not first.
        rows = [(dict(point("a", "1gbit", 2, 1, [1], [1]), repeat=i), t, (11.0, False),
                 11.0 / t - 1) for i, t in [(2, 15.0), (1, 8.0), (3, 10.0)]]
        [(p, measured, predicted, error)] = map_report.point_rows(rows)
        self.assertEqual((p.get("repeat"), measured, predicted), (1, 10.0, (11.0, False)))
        self.assertAlmostEqual(error, 0.1)
        self.assertFalse(map_report.validated(rows, "1gbit", 2))
        self.assertTrue(map_report.validated(map_report.point_rows(rows), "1gbit", 2))
        self.assertIn("Within 20%: 1 of 1 measured points that reached the target with a "
                      "held-out prediction, a point's time its runs' median. Run by run: 1 of "
                      "3.", "\n".join(map_report.point_lines(rows, map_report.point_rows(rows))))
        # Without a prediction a point is counted once among those that reached it with none.
        bare = [(p, t, None, None) for p, t, _, _ in rows]
        self.assertEqual(map_report.point_rows(bare)[0][1:], (10.0, None, None))
        self.assertIn("Within 20%: 0 of 0 measured points that reached the target with a "
                      "held-out prediction, a point's time its runs' median (1 more reached it "
                      "with none: n/a above). Run by run: 0 of 0.",
                      "\n".join(map_report.point_lines(bare, map_report.point_rows(bare))))

    def test_a_median_lead_of_an_even_count_is_the_mean_of_the_middle_two(self):
        cells = {("1gbit", 2): [(10.0, "a"), (11.0, "b")],
                 ("100mbit", 2): [(10.0, "a"), (13.0, "b")]}
        [(model, sync, _, won, lead, validated)] = map_report.pick_when_rows("m", cells, [], {})
        self.assertEqual((model, sync, won, validated), ("m", "a", 2, 0))
        self.assertAlmostEqual(lead, 0.2)

    def test_a_cell_compares_compute_of_one_kind(self):
        # a ran at 4 ranks (two to a core here, 20 ms), b did not: at 4 ranks both take their
        # 2-rank compute, and a's 10 ms beats b's 12.
        def profile(compute_ms):
            return {"bytes": {2: 1e6}, "law": "allreduce", "events": 1.0, "units": {2: 2},
                    "compute_ms": compute_ms, "target": TARGET}
        cells = map_report.grid({"a": profile({2: 10.0, 4: 20.0}), "b": profile({2: 12.0})},
                                FITS)
        self.assertEqual([s for _, s in cells[("1gbit", 4)]], ["a", "b"])
        both = map_report.grid({"a": profile({2: 10.0, 4: 20.0}),
                                "b": profile({2: 12.0, 4: 13.0})}, FITS)
        self.assertEqual([s for _, s in both[("1gbit", 4)]], ["b", "a"])

    def test_a_points_runs_give_its_median_and_their_spread(self):
        def runs(sync, link, times):
            return [(point(sync, link, 2, 1, [1], [1]), t, (t, False), 0.0) for t in times]
        # At 1gbit a's runs (10, 11, 12) all beat b's (15, 16, 30); at 10gbit they overlap.
        rows = (runs("a", "1gbit", [10.0, 12.0, 11.0]) + runs("b", "1gbit", [15.0, 30.0, 16.0])
                + runs("a", "10gbit", [10.0, 14.0]) + runs("b", "10gbit", [12.0, 13.0])
                + [(point("b", "10gbit", 2, 1, [1], [1]), None, None, None)])
        # Medians, not the first run: 16 against 11 at 1gbit; 12.5 against 12 at 10gbit.
        [(link, ranks, fastest, predicted, lead)] = map_report.winner_checks(
            map_report.point_rows(rows))
        point_runs = map_report.runs_by_point(rows)
        self.assertEqual((link, ranks, fastest, predicted), ("1gbit", 2, "a", "a"))
        self.assertAlmostEqual(lead, 16 / 11 - 1)
        lines = "\n".join(map_repeats.repeat_lines(point_runs))
        self.assertIn("| b | 1gbit | 2 | 3 | 16.0 s | 15.0 – 30.0 s | 100% |", lines)
        self.assertIn("| b | 10gbit | 2 | 2 | 12.5 s | 12.0 – 13.0 s | 8% |", lines)
        # Three runs apart: p = 2/20, the least three against three can give: not settled.
        self.assertIn("- 1gbit, 2 ranks: a fastest (median 11.0 s), 45% ahead of b; "
                      "p = 0.100 over their runs: within the spread, not settled.", lines)
        self.assertIn("- 10gbit, 2 ranks: a fastest (median 12.0 s), 4% ahead of b; "
                      "p = 1.000 over their runs: within the spread, not settled.", lines)
        four = map_repeats.repeat_lines({("a", "1gbit", 2): [(t, None) for t in (1, 2, 3, 4)],
                                         ("b", "1gbit", 2): [(t, None) for t in (5, 6, 7, 8)]})
        self.assertIn("p = 0.029 over their runs: settled.", "\n".join(four))
        # Settled over the runner-up by medians, not over c: c's one run faster than all of a's
        # leaves a's lead over it unsettled.
        wide = {("a", "1gbit", 2): [1, 2, 3, 4], ("b", "1gbit", 2): [5, 6, 7, 8],
                ("c", "1gbit", 2): [0.5, 9, 10, 11], ("d", "1gbit", 2): [9, 10, 11, 12]}
        lines = "\n".join(map_repeats.repeat_lines(
            {key: [(x, None) for x in runs] for key, runs in wide.items()}))
        self.assertIn("p = 0.029 over their runs: settled; its lead over c (p = 0.343) is not.",
                      lines)
        del wide[("c", "1gbit", 2)]
        lines = "\n".join(map_repeats.repeat_lines(
            {key: [(x, None) for x in runs] for key, runs in wide.items()}))
        self.assertIn("p = 0.029 over their runs: settled, and over every other.", lines)
        one_each = map_report.runs_by_point(rows[:1] + rows[3:4])
        self.assertEqual(map_repeats.repeat_lines(one_each), [])
        # A runner-up that ran once is still the runner-up, but settles nothing.
        lines = "\n".join(map_repeats.repeat_lines(
            map_report.runs_by_point(rows[:3] + runs("b", "1gbit", [11.5]))))
        self.assertIn("a fastest (median 11.0 s), 5% ahead of b; one of the two ran once", lines)

    def test_a_lead_is_settled_by_a_two_sided_rank_test(self):
        # Four runs each: all apart settles (p = 2/70), either way round; one pair the other
        # way round does not (p = 4/70).
        apart_p, lead = map_repeats.rank_test([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])
        self.assertEqual((round(apart_p * 70, 6), lead), (2, -1))
        self.assertEqual(map_repeats.rank_test([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0])[1], 1)
        crossed_p, lead = map_repeats.rank_test([1.0, 2.0, 3.0, 5.0], [4.0, 6.0, 7.0, 8.0])
        self.assertEqual((round(crossed_p * 70, 6), lead), (4, 0))
        # Three runs each never settle: p is at least 2/20.
        self.assertEqual(map_repeats.rank_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])[1], 0)

    def test_a_stragglers_slowdown_is_rank_tested(self):
        without = [10.0, 11.0, 12.0, 13.0]
        self.assertEqual(map_repeats.slowdown_cell(without, [14.0, 15.0, 16.0, 17.0]),
                         "p = 0.029: settled")
        self.assertEqual(map_repeats.slowdown_cell(without, [12.5, 15.0, 16.0, 17.0]),
                         "p = 0.057: not settled")
        self.assertEqual(map_repeats.slowdown_cell(without, [6.0, 7.0, 8.0, 9.0]),
                         "p = 0.029: faster with it, settled")
        self.assertEqual(map_repeats.slowdown_cell(without, [20.0]), "n/a (one run)")

    def test_each_synchroniser_against_the_baseline(self):
        runs = {("allreduce", "1gbit", 2): [20.0, 25.0, 28.0, 30.0],
                ("a", "1gbit", 2): [10.0, 15.0, 17.0, 19.0],
                ("b", "1gbit", 2): [15.0, 22.0, 26.0, 35.0],
                ("c", "1gbit", 2): [31.0, 35.0, 38.0, 40.0], ("d", "1gbit", 2): [5.0],
                ("a", "10gbit", 2): [1.0, 2.0, 3.0, 4.0]}
        self.assertEqual(map_repeats.against_baseline(runs), [
            "- 1gbit, 2 ranks, against allreduce (4 runs, 20.0 – 30.0 s): settled faster: a; "
            "settled slower: c; not settled: b. With Holm's correction for these 3 tests: "
            "settled faster: none; settled slower: none.", ""])
        del runs[("allreduce", "1gbit", 2)]
        self.assertEqual(map_repeats.against_baseline(runs), [])
        # Eight runs apart each side: p = 2/12870, which Holm keeps for both of two tests.
        runs.update({("allreduce", "10gbit", 2): [20.0 + i for i in range(8)],
                     ("a", "10gbit", 2): [1.0 + i for i in range(8)],
                     ("b", "10gbit", 2): [30.0 + i for i in range(8)]})
        self.assertEqual(map_repeats.against_baseline(runs), [
            "- 10gbit, 2 ranks, against allreduce (8 runs, 20.0 – 27.0 s): settled faster: a; "
            "settled slower: b; not settled: none. With Holm's correction for these 2 tests: "
            "settled faster: a; settled slower: b.", ""])
        del runs[("b", "10gbit", 2)]
        self.assertIn("With Holm's correction for this 1 test: settled faster: a;",
                      map_repeats.against_baseline(runs)[0])

    def test_holm_steps_down_until_a_test_fails(self):
        # 0.01 <= 0.05 / 3 is kept; 0.03 > 0.05 / 2 fails, and so 0.04 is not tried.
        self.assertEqual(map_repeats.holm([0.01, 0.04, 0.03]), [True, False, False])
        # 0.01 <= 0.025, then 0.02 <= 0.05.
        self.assertEqual(map_repeats.holm([0.02, 0.01]), [True, True])
        self.assertEqual(map_repeats.holm([0.002, 0.009, 0.004]), [True] * 3)
        # Step-down, not Bonferroni: 0.04 is held to 0.05 once 0.01 is kept (Bonferroni: 0.025).
        self.assertEqual(map_repeats.holm([0.01, 0.04]), [True, True])
        self.assertEqual(map_repeats.holm([0.05 / 3, 0.025, 0.05]), [True] * 3)  # each at its line
        self.assertEqual(map_repeats.holm([0.06]), [False])
        self.assertEqual(map_repeats.holm([]), [])

    def test_a_points_repeats_are_held_out_with_it(self):
        def run(link, ranks, wall, repeat=1):
            return dict(point("a", link, ranks, 1e6, [wall, 2 * wall], [0.84, 0.86]),
                        repeat=repeat)
        runs = [run("unlimited", 2, 4.0), run("unlimited", 2, 4.4, 2), run("1gbit", 2, 6.0),
                run("1gbit", 4, 6.0), run("1gbit", 4, 7.0, 2)]
        rows = map_report.checks(runs, FITS, TARGET)
        # Alone at 4 ranks, both runs: neither is predicted from the other.
        self.assertEqual([r[2] for r in rows[3:]], [None, None])
        # Both unlimited runs are predicted from the 1gbit run alone.
        self.assertEqual(rows[0][2], rows[1][2])
        self.assertEqual(rows[0][2], map_model.predict(map_model.profiles(
            runs[2:], FITS, TARGET)["a"], FITS, "unlimited", 2))
        self.assertEqual(map_report.run_name(runs[1]), "a (run 2)")

    def test_a_region_is_spans_of_links_with_their_ranks(self):
        cells = {(link, r) for link in ("100mbit", "1gbit") for r in (4, 8, 16)}
        cells |= {("10gbit", 2), ("10gbit", 64)}
        self.assertEqual(map_report.region(cells), "100 Mbit/s–1 Gbit/s at 4–16 ranks; "
                                                   "10 Gbit/s at 2, 64 ranks")

    @NO_BUCKET
    def test_a_report_from_points(self):
        with tempfile.TemporaryDirectory() as out:
            for sync, walls, wire in (("allreduce", [4.0, 8.0], 8e5), ("diloco", [3.0, 6.0],
                                                                         5e4)):
                for link, scale in (("unlimited", 1.0), ("1gbit", 1.5)):
                    run = os.path.join(out, "runs", "mlp_narrow", "map", sync, f"{link}_n2")
                    os.makedirs(run)
                    with open(os.path.join(run, "point.json"), "w") as f:
                        json.dump(point(sync, link, 2, wire, [w * scale for w in walls],
                                        [0.84, 0.86], 1.0 if sync == "allreduce" else 1 / 16),
                                  f)
            run = os.path.join(out, "runs", "mlp_narrow", "straggler", "allreduce", "1gbit_n2")
            os.makedirs(run)
            with open(os.path.join(run, "point.json"), "w") as f:
                json.dump(point("allreduce", "1gbit", 2, 8e5, [9.0, 18.0], [0.84, 0.86]), f)
            with open(os.path.join(out, "tuned.json"), "w") as f:
                json.dump({"mlp_narrow": {"allreduce": {"lr": 0.1}, "diloco": {"lr": 0.1}}}, f)
            with open(os.path.join(out, "fits.json"), "w") as f:
                json.dump(FITS, f)
            failed = map_report.build(out)
            self.assertEqual(failed, [])
            with open(os.path.join(out, "report.md")) as f:
                report = f.read()
            with open(os.path.join(out, "pick_when.md")) as f:
                self.assertIn("| mlp_narrow |", f.read())
            self.assertIn("## mlp_narrow (target: 85% test accuracy)", report)
            # allreduce's 938 steps took 4.26 ms more each at 1gbit than on the unlimited link,
            # against 8.2 ms of communication there: 3.94 ms hid.
            self.assertIn("Window (all of DDP's family): 3.9 ms at 2 ranks.", report)
            # A point from before --straggler_limit slept: the heading names no limit.
            self.assertIn("### A straggler (the last rank computes 1.5× as long)\n", report)
            # Without a straggler 12 s at 1gbit (8 s x 1.5), with one 18 s: 50% slower.
            self.assertIn("| allreduce | 1gbit | 2 | 12.0 s | 18.0 s | 50% | n/a (one run) |",
                          report)
            self.assertTrue(os.path.isfile(os.path.join(out, "map_mlp_narrow.png")))
            map_report.build(out, other=out)  # a sitting agrees with itself
            with open(os.path.join(out, "report.md")) as f:
                report = f.read()
            self.assertIn("the same setting kept for 2 of the 2 synchronisers", report)
            self.assertIn("differs by a median of 0% and at most 0%", report)
            self.assertIn("the measured fastest is the same at 2 of 2 settings", report)
            self.assertIn("the map's predicted fastest is the same in 42 of 42 cells", report)
            # Against a sitting of allreduce alone: its points compare, but neither a
            # fastest (one synchroniser in common) nor the maps (other synchronisers).
            with tempfile.TemporaryDirectory() as other:
                shutil.copytree(os.path.join(out, "runs", "mlp_narrow", "map", "allreduce"),
                                os.path.join(other, "runs", "mlp_narrow", "map", "allreduce"))
                with open(os.path.join(other, "tuned.json"), "w") as f:
                    json.dump({"mlp_narrow": {"allreduce": {"lr": 0.1}}}, f)
                shutil.copy(os.path.join(out, "fits.json"), other)
                lines = "\n".join(map_report.agreement_lines(out, other))
            self.assertIn("the same setting kept for 1 of the 1 synchronisers", lines)
            self.assertIn("2 points measured in both", lines)
            self.assertIn("the same at 0 of 0 settings", lines)
            self.assertIn("not compared: their synchronisers differ (only here: diloco; "
                          "only there: none)", lines)


def grid(mode, models=None, syncs=None, ranks=None):
    """The flags the grid functions read, as parse_args leaves them."""
    return argparse.Namespace(mode=mode, models=models, syncs=syncs, ranks=ranks)


class FlagsTest(unittest.TestCase):
    def test_bad_input_is_one_error_line(self):
        binaries = [f"--{b}=/bin/true" for b in ("train", "bench", "on_hosts")]
        for argv in (["--timeout=0"], ["--report_only", "--out_dir=/nonexistent/x"],
                     ["--train=/nonexistent"], ["--models=mlp_narrow,gpt"], ["--syncs="],
                     ["--full", "--syncs=allreduce_nesterov", "--models=char_lm"] + binaries,
                     ["--full", "--models=char_lm", "--torch_module=/nonexistent"] + binaries,
                     ["--quick", "--full"], ["--repeats=0"], ["--repeats=10"],
                     ["--repeats=two"]):
            with self.assertRaises(SystemExit) as e:
                sync_map.parse_args(argv)
            self.assertEqual(e.exception.code, 2, argv)

    def test_a_cpu_quota_sitting_asks_the_trainer_first(self):
        # A trainer that cannot hold its straggler to a quota: the sitting stops at once
        # with its whole line; with the sleep, nothing asks.
        why = ("--straggler_limit=cpu_quota: cannot make the cgroup /sys/fs/cgroup/system.slice/"
               + "d" * 120 + "/ringlab-straggler-42: Read-only file system")
        with tempfile.TemporaryDirectory() as tmp:
            train, asked = os.path.join(tmp, "train"), os.path.join(tmp, "asked")
            with open(train, "w") as f:
                f.write(f"#!/bin/sh\necho \"$@\" >> {asked}\necho 'error: {why}' >&2\nexit 2\n")
            os.chmod(train, 0o755)
            for name in sync_map.DATA_FILES:
                open(os.path.join(tmp, name), "w").close()
            argv = [f"--train={train}", "--bench=/bin/true", "--on_hosts=/bin/true",
                    f"--data_dir={tmp}", "--models=mlp_narrow", "--straggler_limit=cpu_quota"]
            stderr = io.StringIO()
            with self.assertRaises(SystemExit) as e, mock.patch("sys.stderr", stderr):
                sync_map.parse_args(argv)
            self.assertEqual(e.exception.code, 2)
            self.assertEqual(stderr.getvalue(), f"error: {why}\n")
            with open(asked) as f:
                self.assertEqual(f.read(), "--quiet --epochs=1 --straggler_rank=1 "
                                 "--straggler_factor=1.5 --straggler_limit=cpu_quota\n")
            os.remove(asked)
            self.assertEqual(sync_map.parse_args(argv[:-1]).straggler_limit, "sleep")
            self.assertFalse(os.path.exists(asked))

    def test_every_grid_point_is_named_once(self):
        names = [(m, s, sync_map.point_name(f))
                 for m, s, f in map_grid.tune_runs(grid("full"))]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(len(map_grid.tune_runs(grid("quick"))), 4 + 4 + 8 + 8)
        # The language model: its three synchronisers, 3 learning rates (x 2 outer ones).
        lm = map_grid.tune_runs(grid("full", models=["char_lm"]))
        self.assertEqual(len(lm), 3 + 6 + 6)
        self.assertEqual(len(map_grid.tune_runs(grid("full", syncs=["diloco"]))),
                         8 + 8 + 6)

    def test_bazel_run_takes_paths_from_where_the_command_was_typed(self):
        typed_in = tempfile.mkdtemp()
        root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                             "..", ".."))
        result = subprocess.run(
            ["bash", os.path.join(root, "experiments", "sync_map", "sync_map.sh"),
             "--report_only", "--out_dir=relative"], cwd=root, capture_output=True, text=True,
            env=dict(os.environ, BUILD_WORKING_DIRECTORY=typed_in), timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn(f"--out_dir={typed_in}/relative holds no tuned.json", result.stderr)

    def test_the_grid_takes_each_models_own_settings(self):
        args = grid("full")
        self.assertEqual(map_grid.per_model(args, "mlp_wide", "ranks"), (2, 4, 8))
        self.assertEqual(map_grid.per_model(args, "char_lm", "ranks"), (2, 4))
        self.assertEqual(map_grid.per_model(args, "char_lm", "stragglers"), (("1gbit", 2),))
        self.assertEqual(map_grid.grid_syncs(args, "char_lm"),
                         ["allreduce", "diloco", "streaming_diloco"])
        # --syncs and --ranks replace the mode's lists; a model runs the named syncs it has,
        # and the straggler settings at the rank counts it runs.
        args = grid("full", syncs=["fp16", "allreduce_nesterov", "allreduce"], ranks=[4, 2])
        self.assertEqual(map_grid.grid_syncs(args, "char_lm"), ["allreduce", "fp16"])
        self.assertEqual(map_grid.grid_syncs(args, "mlp_narrow"),
                         ["allreduce", "allreduce_nesterov", "fp16"])
        self.assertEqual(map_grid.grid_ranks(args, "mlp_wide"), [2, 4])
        # 2 ranks always: their points give the cost model compute and bytes.
        self.assertEqual(map_grid.grid_ranks(grid("full", ranks=[8, 8]), "char_lm"), [2, 8])
        self.assertEqual(map_grid.grid_stragglers(grid("full", ranks=[2]), "mlp_narrow"),
                         [("unlimited", 2), ("1gbit", 2), ("100mbit", 2)])
        with self.assertRaises(SystemExit) as e:
            sync_map.parse_args(["--ranks=2,3"])
        self.assertEqual(e.exception.code, 2)
        self.assertEqual(sync_map.parser().parse_args(["--ranks=8,2"]).ranks, [8, 2])

    def test_a_recorded_command_names_no_folder_of_this_machine(self):
        typed = ["--train=/r/train", "--full", "--out_dir", "../sitting", "--bench", "/r/b",
                 "--second_sitting=../sitting-b", "--models=mlp_wide"]
        self.assertEqual(sync_map.recorded_argv(typed),
                         ["--full", "--out_dir=OUT", "--second_sitting=OTHER", "--models=mlp_wide"])

    def test_tuning_widens_a_grid_whose_best_is_at_an_edge(self):
        def tried(best_lr, model="mlp_narrow", sync="allreduce"):
            """The learning rates tuning runs when accuracy peaks at best_lr, and the one kept."""
            runs = []

            def fake_run(args, argv, run_dir, meta, label):
                lr = meta["flags"]["lr"]
                runs.append(lr)
                accuracy = 0.9 - abs(math.log2(lr / best_lr)) / 100
                return dict(meta, evals=[{"test_accuracy": accuracy}])
            real, sync_map.run_one = sync_map.run_one, fake_run
            try:
                kept = sync_map.tune_sync(argparse.Namespace(train="/t", timeout=60,
                                                             data_dir=None), "/o", model, sync)
            finally:
                sync_map.run_one = real
            return runs, kept["lr"]
        # Inside the declared grid (0.05..0.4): nothing more.
        self.assertEqual(tried(0.1), ([0.05, 0.1, 0.2, 0.4], 0.1))
        # Best past the top: 0.8, then 1.6, and no further (two steps a side).
        self.assertEqual(tried(3.0), ([0.05, 0.1, 0.2, 0.4, 0.8, 1.6], 1.6))
        self.assertEqual(tried(0.8), ([0.05, 0.1, 0.2, 0.4, 0.8, 1.6], 0.8))
        # Below the bottom, with each outer value of the DiLoCo family: 0.025 is best and the
        # edge again, so 0.0125 runs too.
        runs, kept = tried(0.03, sync="diloco")
        self.assertEqual((runs[8:], kept), ([0.025, 0.025, 0.0125, 0.0125], 0.025))
        self.assertEqual(map_grid.widened_lr((0.001, 0.002), [0.001, 0.002], 0.001), 0.0005)
        self.assertIsNone(map_grid.widened_lr((0.001, 0.002, 0.004), [0.001, 0.002, 0.004],
                                              0.002))

    def test_a_map_point_trains_to_the_target_and_no_further(self):
        budget = sync_map.point_budget
        self.assertEqual(budget("mlp_narrow", None, 2), (6, None))
        self.assertEqual(budget("mlp_narrow", {"units": {2: 3}}, 2), (3, None))
        # 8 ranks: 6 x 4 epochs at most, but twice and one more than 4 ranks' 5.
        self.assertEqual(budget("mlp_narrow", {"units": {2: 3, 4: 5}}, 8), (11, None))
        self.assertIsNone(budget("mlp_narrow", {"units": {2: 3, 4: None}}, 8)[0])
        self.assertIsNone(budget("mlp_narrow", {"units": {2: None}}, 2)[0])
        # Missed at 2 ranks: 8 do not run either, though 4 did not run.
        self.assertIsNone(budget("mlp_narrow", {"units": {2: None}}, 8)[0])
        # The language model always runs its schedule's steps.
        self.assertEqual(budget("char_lm", {"units": {2: 150}}, 4), (300, None))
        self.assertEqual(map_grid.hosts(2), 2)
        self.assertEqual(map_grid.hosts(4), 2)
        self.assertEqual(map_grid.hosts(8), 4)

    def test_a_straggler_point_of_another_limit_is_superseded(self):
        # A straggler point from before --straggler_limit slept; a map point has no limit.
        with tempfile.TemporaryDirectory() as run:
            with open(os.path.join(run, "point.json"), "w") as f:
                json.dump(point("allreduce", "1gbit", 2, 1, [1.0], [0.86]), f)
            self.assertIsNotNone(sync_map.supersede(run, {"lr": 0.1}))
            self.assertIsNotNone(sync_map.supersede(run, {"lr": 0.1}, "sleep"))
            self.assertIsNone(sync_map.supersede(run, {"lr": 0.1}, "cpu_quota"))
            self.assertTrue(os.path.isfile(os.path.join(run, "point.superseded.json")))
        argv = []
        args = argparse.Namespace(straggler_limit="cpu_quota")
        with mock.patch.object(sync_map, "train_argv", lambda *a: []), \
                mock.patch.object(sync_map, "run_one",
                                  lambda args, a, run_dir, meta, label: argv.append((a, meta))):
            sync_map.run_point(args, "mlp_narrow", "allreduce", {"lr": 0.1}, ("1gbit", 4), 3,
                               "run", "label", straggler=True)
        self.assertEqual(argv[0][0], ["--straggler_rank=3", "--straggler_factor=1.5",
                                      "--straggler_limit=cpu_quota"])
        self.assertEqual(argv[0][1]["straggler_limit"], "cpu_quota")

    def test_a_repeat_runs_the_whole_grid_again_where_its_first_run_finished(self):
        calls = []
        real, sync_map.map_point = sync_map.map_point, lambda *a, **k: calls.append(
            (a[3], a[5], a[7], k.get("straggler", False)))
        try:
            sync_map.map_points(argparse.Namespace(mode="quick", models=None, ranks=None,
                                                   straggler_limit="sleep",
                                                   syncs=["allreduce", "diloco"], repeats=2),
                                tempfile.mkdtemp(), {"mlp_narrow": {"allreduce": {"lr": 0.1},
                                                                    "diloco": {"lr": 0.1}}}, {})
        finally:
            sync_map.map_point = real
        # The quick grid: 3 links x 2 rank counts and a straggler, per synchroniser.
        self.assertEqual([c[2] for c in calls], [1] * 14 + [2] * 14)
        self.assertEqual(calls[:14], [(c[0], c[1], 1, c[3]) for c in calls[14:]])
        self.assertEqual(calls[6], ("allreduce", ("1gbit", 2), 1, True))
        out = tempfile.mkdtemp()
        first = os.path.join(out, "runs", "mlp_narrow", "map", "allreduce", "1gbit_n2")
        os.makedirs(first)
        with open(os.path.join(first, "point.json"), "w") as f:
            json.dump(point("allreduce", "1gbit", 2, 1, [1, 2, 3], [0.8, 0.86, 0.87]), f)
        lm_first = os.path.join(out, "runs", "char_lm", "map", "fp16", "1gbit_n2")
        os.makedirs(lm_first)
        with open(os.path.join(lm_first, "point.json"), "w") as f:
            json.dump(dict(sync="fp16", evals=[dict(step=s, val_loss=2.5 - s / 200, wall_s=s)
                                               for s in range(25, 301, 25)]), f)
        ran = []
        real, sync_map.run_one = sync_map.run_one, lambda args, argv, run_dir, meta, label: \
            ran.append((argv, run_dir))
        try:
            args = argparse.Namespace(train="/t", timeout=60, data_dir=None, on_hosts="/oh",
                                      torch_module="/tm")
            for link in ("1gbit", "100mbit"):  # 100mbit's first run has not finished
                sync_map.map_point(args, out, "mlp_narrow", "allreduce", {"lr": 0.1},
                                   (link, 2), FITS, repeat=3)
            sync_map.map_point(args, out, "char_lm", "fp16", {"lr": 0.006}, ("1gbit", 2),
                               FITS, repeat=2)
        finally:
            sync_map.run_one = real
        [(argv, run_dir), (lm_argv, lm_dir)] = ran
        self.assertEqual(run_dir, first + "_r3")
        self.assertIn("--epochs=3", argv)  # as far as the first run trained
        self.assertIn("--link=1gbit", argv)
        self.assertEqual(lm_dir, lm_first + "_r2")
        self.assertIn("--steps=300", lm_argv)  # 12 evaluations, the last at step 300
        self.assertEqual([map_grid.repeat_of(d) for d in (first, run_dir, lm_dir)], [1, 3, 2])

    def test_the_language_model_runs_through_the_synchronizer(self):
        args = argparse.Namespace(timeout=60, torch_module="/tm", on_hosts="/oh")
        flags = {"lr": 0.003, "outer_lr": 0.7}
        tune = sync_map.train_argv(args, "char_lm", "diloco", flags, 200, "/r")
        self.assertIn("--steps=200", tune)
        self.assertIn("--lr=0.003", tune)
        self.assertIn("--sync_option=inner_steps=16", tune)
        self.assertIn("--sync_option=outer_lr=0.7", tune)
        self.assertEqual(tune[-1], "--nprocs=2")
        across = sync_map.train_argv(args, "char_lm", "diloco", flags, 300, "/r", "1gbit", 4)
        self.assertEqual(across[:5], ["/oh", "--nprocs=4", "--hosts=2", "--link=1gbit", "--"])


class SittingTest(unittest.TestCase):
    """A sitting's record: on file from its start, and one kernel and one memory behaviour a
    folder."""

    def setUp(self):
        self.out = tempfile.mkdtemp()
        self.args = argparse.Namespace(mode="quick", out_dir=self.out, argv=["--quick"],
                                       train="/bin/true", on_hosts="/bin/true",
                                       second_sitting=None)
        saved = {name: getattr(sync_map, name) for name in ("probe_hosts", "tune")}
        self.addCleanup(lambda: [setattr(sync_map, n, f) for n, f in saved.items()])
        self.addCleanup(setattr, run_driver, "blas_core", run_driver.blas_core)
        sync_map.probe_hosts = lambda on_hosts: None

        def stopped(args, out):
            raise KeyboardInterrupt  # the sweep stopped during its tuning

        sync_map.tune = stopped

    def sit(self, kernel):
        def probe(argv):  # the trainer's OpenBLAS is the one a sitting's runs load
            self.assertEqual(argv, [self.args.train, "--help"])
            return kernel

        run_driver.blas_core = probe
        sync_map.run_all(self.args, self.out)

    def rewrite(self, **fields):
        """The record with these fields changed (None: removed), as an older or edited one."""
        record = self.record()
        for name, value in fields.items():
            if value is None:
                del record[name]
            else:
                record[name] = value
        with open(os.path.join(self.out, "invocation.json"), "w") as f:
            json.dump(record, f)

    def refused(self, kernel):
        """The one error line of a sitting that does not continue, the record unchanged."""
        before = self.record()
        with self.assertRaises(SystemExit) as e, mock.patch("sys.stderr", io.StringIO()) as err:
            self.sit(kernel)
        self.assertEqual(e.exception.code, 2)
        self.assertEqual(self.record(), before)
        self.assertEqual(len(err.getvalue().splitlines()), 1)
        return err.getvalue()

    def record(self):
        with open(os.path.join(self.out, "invocation.json")) as f:
            return json.load(f)

    def test_a_sweep_stopped_midway_has_its_kernel_on_record(self):
        with self.assertRaises(KeyboardInterrupt):
            self.sit("Cooperlake")
        self.assertEqual(self.record()["blas_core"], "Cooperlake")
        self.assertNotIn("duration_s", self.record())
        with self.assertRaises(KeyboardInterrupt):  # continued on the same kernel
            self.sit("Cooperlake")
        self.assertEqual(len(self.record()["earlier"]), 1)
        self.assertIn("not finished",
                      map_report.minutes(self.record()["earlier"][0]))

    def test_a_sweep_continued_on_another_kernel_stops_with_one_error_line(self):
        with self.assertRaises(KeyboardInterrupt):
            self.sit("Cooperlake")
        self.assertIn("set OPENBLAS_CORETYPE=Cooperlake,", self.refused("Haswell"))
        with self.assertRaises(KeyboardInterrupt):  # a kernel not found out proves nothing
            self.sit("?")
        with self.assertRaises(KeyboardInterrupt):  # on either side
            self.sit("Haswell")
        self.rewrite(blas_core=None)  # nor does a record from before kernels were recorded
        with self.assertRaises(KeyboardInterrupt):
            self.sit("Cooperlake")

    def test_a_sweep_continued_with_other_memory_stops_with_one_error_line(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("GLIBC_TUNABLES", None)
            with self.assertRaises(KeyboardInterrupt):
                self.sit("Cooperlake")
            before = self.record()
            self.assertEqual(before["malloc"], run_driver.MALLOC_KEEP)
            os.environ["GLIBC_TUNABLES"] = ""  # glibc's defaults
            self.assertIn(f"set GLIBC_TUNABLES={run_driver.MALLOC_KEEP},",
                          self.refused("Cooperlake"))
            # A record from before the keep was timed with glibc's defaults.
            self.rewrite(malloc=None)
            with self.assertRaises(KeyboardInterrupt):
                self.sit("Cooperlake")
            os.environ.pop("GLIBC_TUNABLES")
            self.assertIn("set GLIBC_TUNABLES='',", self.refused("Cooperlake"))
            self.rewrite(malloc="?")  # tunables are always known: none prove nothing
            self.refused("Cooperlake")


if __name__ == "__main__":
    unittest.main()
