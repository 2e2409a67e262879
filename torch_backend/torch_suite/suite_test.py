"""PyTorch's own process-group tests with ringlab in gloo's place (suite_main.py): every case
that passes over gloo on this machine's torch (gloo_passes.txt, recorded by suite_main.py
--backend=gloo) must pass over ringlab, except the few in differences.txt, each with why.
Skips, saying why, where torch does not import or is another version than the record's.

    suite_test.py PATH/TO/ringlab_torch.so
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def read_cases(name):
    """{case: rest of its line}, comments and blank lines left out; and the header's lines."""
    cases, header = {}, []
    with open(os.path.join(HERE, name)) as f:
        for line in f:
            if line.startswith("#"):
                header.append(line[1:].strip())
            elif line.strip():
                case, _, rest = line.strip().partition(" ")
                cases[case] = rest.strip()
    return cases, header


def main():
    module_dir = os.path.dirname(os.path.abspath(sys.argv[1]))
    try:
        import torch
    except ImportError as e:
        print(f"skipped: torch does not import ({e})")
        return 0
    passes, header = read_cases("gloo_passes.txt")
    recorded = next((h.split(":", 1)[1].strip() for h in header if h.startswith("torch:")), "")
    if recorded != torch.__version__:
        print(f"skipped: gloo_passes.txt was recorded with torch {recorded}, this is "
              f"{torch.__version__} (record it again: suite_main.py --backend=gloo)")
        return 0
    differences, _ = read_cases("differences.txt")
    for case, why in differences.items():
        if not why:
            print(f"differences.txt: {case} says nothing of why")
            return 1
    out = os.path.join(tempfile.mkdtemp(), "ringlab.txt")
    pattern = "^(" + "|".join(re.escape(c) for c in sorted(passes)) + ")$"
    env = dict(os.environ, PYTHONPATH=module_dir, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, os.path.join(HERE, "suite_main.py"), "--backend=ringlab",
                    f"--cases={pattern}", f"--out={out}"], env=env, timeout=1500,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    outcomes = {}
    with open(out) as f:
        for line in f:
            case, outcome, *rest = line.rstrip("\n").split(" ", 2)
            outcomes[case] = (outcome, rest[0] if rest else "")
    failed = 0
    for case in sorted(passes):
        outcome, detail = outcomes.get(case, ("not run", ""))
        if outcome == "passed":
            if case in differences:
                print(f"note: {case} passes now; differences.txt may drop it")
            continue
        if case in differences:
            print(f"differs as recorded: {case} {outcome} ({differences[case]})")
            continue
        failed += 1
        print(f"FAILED: {case} passes over gloo, {outcome} over ringlab: {detail}")
    ran = sum(1 for o, _ in outcomes.values() if o == "passed")
    print(f"{ran} of the {len(passes)} cases gloo passes passed over ringlab; {failed} failed "
          f"unexpectedly")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
