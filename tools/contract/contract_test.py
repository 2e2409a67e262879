#!/usr/bin/env python3
"""The error contract of every command the kit ships, one suite.

Each table (tables/<command>.txt) lists bad inputs for one command; every case
must end in exactly one stderr line starting `error: ` that names what is
wrong, exit status 2, nothing on stdout, before any work starts: no process
forked or spawned (no rank, launcher or reference run), no namespace entered
or made (no emulated host), and the working directory, which holds an
--out_dir with earlier contents and a regular file, hashed the same before
and after. `--help` must exit 0 and print something.

    contract_test.py --tables DIR NAME=PATH...

Table lines, `#` comments aside:
    help                          the command's --help exits 0
    [?condition ...] [VAR=value ...] ARGS => FRAGMENT
ARGS are split as a shell would (no expansion); {out} is a directory with
earlier contents, {file} a regular file, {missing} a path that does not
exist. `?no_netem` runs the case only where the kernel lacks netem, `?cuda`
and `?nccl` only where the commands were built with CUDA (--with_cuda) and
with NCCL (--with_nccl).
"""
import argparse
import gzip
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

TIMEOUT_S = 120
# Syscalls that start a process or enter/make a namespace. A clone that
# makes a thread (CLONE_THREAD) is neither.
TRACED = "clone,clone3,fork,vfork,unshare,setns"


def kernel_lacks_netem():
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            config = f.read()
    except OSError:
        return False  # unknown: the case cannot be run as stated
    return re.search(r"^CONFIG_NET_SCH_NETEM=[ym]$", config, re.M) is None


def parse_table(path):
    """[(line number, conditions, env, args, fragment)] and whether help is checked."""
    cases, help_checked = [], False
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line == "help":
                help_checked = True
                continue
            if line.startswith("=> "):  # no arguments at all
                line = " " + line
            if " => " not in line:
                raise SystemExit(f"{path}:{number}: no ' => FRAGMENT'")
            left, fragment = line.split(" => ", 1)
            words = shlex.split(left)
            conditions = [w for w in words if w.startswith("?")]
            words = [w for w in words if not w.startswith("?")]
            env = {}
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                name, value = words.pop(0).split("=", 1)
                env[name] = value
            cases.append((number, conditions, env, words, fragment))
    return cases, help_checked


def tree_digest(root):
    """Every path under root with its kind, mode and contents (or link target)."""
    digest = hashlib.sha256()
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            digest.update(f"{os.path.relpath(path, root)} {info.st_mode:o}\n".encode())
            if os.path.islink(path):
                digest.update(os.readlink(path).encode())
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def make_workspace(parent):
    work = tempfile.mkdtemp(dir=parent)
    out = os.path.join(work, "out")
    os.makedirs(os.path.join(out, "earlier_run"))
    with open(os.path.join(out, "earlier_run", "losses.csv"), "w") as f:
        f.write("rank,step,loss\n0,0,0.69\n")
    with open(os.path.join(work, "file"), "w") as f:
        f.write("a regular file\n")
    return work, {"{out}": out, "{file}": os.path.join(work, "file"),
                  "{missing}": os.path.join(work, "missing", "absent")}


def started_work(log):
    """The traced calls that started a process or touched a namespace."""
    found = []
    with open(log, errors="replace") as f:
        for line in f:
            call = re.match(r"\d+\s+(\w+)\(", line)
            if call is None:
                continue
            name = call.group(1)
            if name in ("fork", "vfork", "unshare", "setns"):
                found.append(line.strip())
            elif name in ("clone", "clone3") and "CLONE_THREAD" not in line:
                found.append(line.strip())
    return found


def run_case(binary, env_extra, args, fragment, parent):
    """The problems with one case, and its stderr."""
    work, places = make_workspace(parent)
    args = [substitute(a, places) for a in args]
    fragment = substitute(fragment, places)
    before = tree_digest(work)
    log = os.path.join(parent, "strace.log")
    # Temporary files a refused command leaves would land in the workspace.
    env = dict(os.environ, BUILD_WORKING_DIRECTORY=work, TMPDIR=work, **env_extra)
    command = ["strace", "-f", "-qq", "-o", log, "-e", "trace=" + TRACED, binary] + args
    try:
        result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"no answer within {TIMEOUT_S} s"], ""
    problems = []
    err_lines = result.stderr.splitlines()
    if result.returncode != 2:
        problems.append(f"exit status {result.returncode}, not 2")
    if len(err_lines) != 1 or not err_lines[0].startswith("error: "):
        problems.append(f"stderr is not one 'error: ' line: {result.stderr!r}")
    if fragment not in result.stderr:
        problems.append(f"the error does not say {fragment!r}")
    if result.stdout:
        problems.append(f"printed on stdout: {result.stdout[:300]!r}")
    if tree_digest(work) != before:
        problems.append("changed the working directory (its out_dir or file)")
    if os.path.exists(places["{missing}"]):
        problems.append("made the missing path")
    work_started = started_work(log)
    if work_started:
        problems.append("started work: " + "; ".join(work_started[:3]))
    shutil.rmtree(work, ignore_errors=True)
    return problems, result.stderr.strip()


def substitute(arg, places):
    for key, value in places.items():
        arg = arg.replace(key, value)
    return arg


def check_help(binary):
    result = subprocess.run([binary, "--help"], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)
    if result.returncode != 0 or not (result.stdout + result.stderr).strip():
        return [f"--help: exit status {result.returncode}, output "
                f"{(result.stdout + result.stderr)[:200]!r}"]
    return []


def run_table(name, binary, table, parent, conditions_met):
    cases, help_checked = parse_table(table)
    failures = check_help(binary) if help_checked else []
    passed, skipped = int(help_checked and not failures), 0
    for number, conditions, env, args, fragment in cases:
        label = f"{name} {' '.join(shlex.quote(a) for a in args)}"
        unmet = [c for c in conditions if c not in conditions_met]
        if unmet:
            print(f"skip: {label} ({' '.join(unmet)} does not hold here)")
            skipped += 1
            continue
        problems, err = run_case(binary, env, args, fragment, parent)
        if problems:
            failures.append(f"{os.path.basename(table)}:{number}: {label}: "
                            + "; ".join(problems) + f" (stderr: {err!r})")
        else:
            passed += 1
            print(f"ok: {label} -> {err}")
    return passed, failures, skipped


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", required=True)
    parser.add_argument("--with_cuda", action="store_true",
                        help="the commands were built with CUDA")
    parser.add_argument("--with_nccl", action="store_true",
                        help="the commands were built with NCCL")
    parser.add_argument("commands", nargs="+", help="NAME=PATH of each command")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("FAIL: strace is missing (tools/setup.sh installs it)")
        return 1
    binaries = dict(c.split("=", 1) for c in args.commands)
    parent = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    conditions_met = {"?no_netem"} if kernel_lacks_netem() else set()
    if args.with_cuda:
        conditions_met.add("?cuda")
    if args.with_nccl:
        conditions_met.add("?nccl")
    passed = skipped = 0
    failures = []
    for table in sorted(os.listdir(args.tables)):
        name = table[:-len(".txt")]
        if name not in binaries:
            print(f"skip: table {table}: {name} is not built here")
            continue
        p, f, s = run_table(name, os.path.abspath(binaries[name]),
                            os.path.join(args.tables, table), parent, conditions_met)
        passed, skipped, failures = passed + p, skipped + s, failures + f
    missing = set(binaries) - {t[:-len(".txt")] for t in os.listdir(args.tables)}
    for name in sorted(missing):
        failures.append(f"{name}: a command without a table (tables/{name}.txt)")
    shutil.rmtree(parent, ignore_errors=True)
    for failure in failures:
        print("FAIL: " + failure)
    print(f"contract: {passed} passed, {len(failures)} failed, {skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
