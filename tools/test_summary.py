#!/usr/bin/env python3
"""Counts test cases, not targets, from the test.xml files of a Bazel run.

Usage: tools/test_summary.py [--since EPOCH_SECONDS] [--title TEXT] LABEL...

Bazel's own summary counts targets, and a target whose cases all called
GTEST_SKIP shows PASSED. This reads each target's test.xml (every shard's),
written by GoogleTest or, for other tests, by Bazel (one case per target),
and prints which cases were skipped and why, then one line:

    cases: P passed, F failed, S skipped

A target with no test.xml newer than --since (it did not build, timed out
before writing one, or was not run) counts as one failed case.
"""
import argparse
import collections
import glob
import os
import sys
import xml.etree.ElementTree as ET


def xml_files(label):
    package, _, name = label.lstrip("/").partition(":")
    root = os.path.join("bazel-testlogs", package, name)
    return [root + "/test.xml"] if os.path.exists(root + "/test.xml") else sorted(
        glob.glob(root + "/shard_*_of_*/test.xml"))


def cases(path):
    """Yields (name, outcome, message) for each case that ran or skipped."""
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "?")
        if case.get("classname"):
            name = case.get("classname") + "." + name
        if case.find("failure") is not None or case.find("error") is not None:
            yield name, "failed", ""
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped = case.find("skipped")
            message = skipped.get("message", "") if skipped is not None else ""
            lines = message.strip().splitlines()  # "file:line", then the text
            yield name, "skipped", lines[-1] if lines else ""
        elif case.get("status", "run") == "run":
            yield name, "passed", ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--since", type=float, default=0.0)
    parser.add_argument("--title", default="")
    parser.add_argument("labels", nargs="*")
    args = parser.parse_args()
    totals = collections.Counter()
    for label in args.labels:
        files = [f for f in xml_files(label) if os.path.getmtime(f) >= args.since]
        if not files:
            print("%s: no test.xml from this run: counted as 1 failed case" % label)
            totals["failed"] += 1
            continue
        skipped = []
        for path in files:
            for name, outcome, message in cases(path):
                totals[outcome] += 1
                if outcome == "skipped":
                    skipped.append((name, message))
        if skipped:
            print("%s: %d case(s) skipped:" % (label, len(skipped)))
            by_reason = collections.defaultdict(list)
            for name, reason in skipped:
                by_reason[reason].append(name)
            for reason, names in by_reason.items():
                print("  %s\n    %s" % (reason or "(no reason given)", ", ".join(names)))
    prefix = args.title + " " if args.title else ""
    print("%scases: %d passed, %d failed, %d skipped" % (
        prefix, totals["passed"], totals["failed"], totals["skipped"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
