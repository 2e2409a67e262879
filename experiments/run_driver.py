"""What every experiment driver does with its runs (fashion_mnist, char_lm, compare, sync_map):
each run in a session of its own, killed with all its ranks past its deadline, its output in a
log and its failure as one line; the probes of the machine (torch, which seed_ddp and the
PyTorch match drivers ask too, emulated hosts, the CPU); the --links parser; and the end of a
driver's main (--dry_run, the runs, the report).

The drivers import it by path (their directory's parent), as cli_errors.
"""

import json
import os
import re
import resource
import shlex
import signal
import subprocess
import time

from cli_errors import fail


def stop(process, grace_s=10):
    """Ends a run and all its ranks: SIGTERM first, which mpirun forwards to ranks it started in
    process groups of their own, then SIGKILL to the run's group."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# glibc's malloc hands blocks over 128 KiB back to the kernel when freed, and a training step
# frees and allocates its activations and gradients each step, so each step faults its memory
# in again and the kernel zeroes it. On a VM a page fault is dear and its cost varies with the
# host: the same language-model run took 40 to 110 s. Blocks up to 32 MiB (far above these
# models' largest tensors, a few MiB) kept in the heap, and the heap never trimmed, fault in
# once (docs/sync-map.md, "Run-to-run spread").
MALLOC_KEEP = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296"


def run_malloc():
    """The GLIBC_TUNABLES execute() gives a run ('' for glibc's defaults)."""
    return os.environ.get("GLIBC_TUNABLES", MALLOC_KEEP)


def malloc_words(tunables):
    """How a report names a sitting's malloc tunables (run_malloc())."""
    if tunables == MALLOC_KEEP:
        return "freed memory kept"
    return f"GLIBC_TUNABLES={tunables}" if tunables else "glibc's malloc defaults"


def execute(argv, deadline_s, log_path, tick=None):
    """Runs argv in its own session (killed with all its ranks past the deadline); its output
    goes to log_path; tick(seconds so far), when given, is called every TICK_S while it runs.
    Returns (status, seconds). The run keeps its freed memory (MALLOC_KEEP) unless the caller
    set GLIBC_TUNABLES."""
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env["GLIBC_TUNABLES"] = run_malloc()
    start = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(a) for a in argv) + "\n")
        log.flush()
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       start_new_session=True)
        except OSError as e:
            return f"failed: cannot start {argv[0]}: {e.strerror}", 0.0
        try:
            code = _wait(process, start + deadline_s, tick)
        except subprocess.TimeoutExpired:
            stop(process)
            return f"failed: no result after {deadline_s:.0f} s: killed", time.monotonic() - start
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): no rank outlives the driver
            stop(process)
            raise
    wall = time.monotonic() - start
    if code == 0:
        return "ok", wall
    with open(log_path, errors="replace") as f:
        errors = [line.strip() for line in f if "error" in line.lower()]
    why = reason(errors[-1]) if errors else f"exit status {code}"
    return f"failed: {why}", wall


def reason(line, most_chars=160):
    """A failing command's error line as one reason: what follows 'error:' (the whole line
    where it has none), stripped, at most most_chars long (None: whole)."""
    return line.split("error:", 1)[-1].strip()[:most_chars]


TICK_S = 5


def _wait(process, deadline, tick):
    """process's exit status, calling tick(seconds so far) every TICK_S; TimeoutExpired past
    the deadline (time.monotonic())."""
    start = time.monotonic()
    while True:
        try:
            return process.wait(timeout=max(0.0, min(TICK_S, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
            if tick is not None:
                tick(time.monotonic() - start)


# Imports Debian's torch, multiplies with the system OpenBLAS it loads, and names its version;
# an import that takes longer than PROBE_TIMEOUT_S is taken as none.
PROBE_TIMEOUT_S = 120
TORCH_PROBE = ["/usr/bin/python3", "-c",
               "import torch; torch.ones(2, 2) @ torch.ones(2, 2); print(torch.__version__)"]


def probe_torch():
    """(torch version, None, the OpenBLAS kernel it multiplies with, as blas_core names it), or
    (None, why torch does not import, '?'): one import of torch serves both."""
    try:
        result = subprocess.run(TORCH_PROBE, env=dict(os.environ, OPENBLAS_VERBOSE="2"),
                                capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, f"import torch did not finish within {PROBE_TIMEOUT_S} s", "?"
    if result.returncode == 0:
        return (result.stdout.strip().splitlines()[-1], None,
                shown_kernel(result.stdout + result.stderr))
    lines = (result.stderr.strip() or "no output").splitlines()
    return None, lines[-1][:160], "?"


def machine():
    model = "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return model, os.cpu_count()


def shown_kernel(text):
    """The kernel OPENBLAS_VERBOSE=2 names in a program's output ('Haswell'), or '?'."""
    for line in text.splitlines():
        if line.startswith("Core: "):
            return line[len("Core: "):].strip()
    return "?"


def blas_core(argv):
    """The OpenBLAS kernel a program (argv, which loads the library and exits) uses, as
    OPENBLAS_VERBOSE=2 names it ('Haswell'), or '?': two machines with different kernels sum in
    different orders, so their runs' arithmetic (and times to target) differ, and a sitting's
    points belong to one kernel."""
    try:
        shown = subprocess.run(argv, env=dict(os.environ, OPENBLAS_VERBOSE="2"),
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return shown_kernel(shown.stdout + shown.stderr)


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_words(record):
    """A sitting's machine as its report names it from its record: 'AMD EPYC (2 cores, OpenBLAS
    Cooperlake, freed memory kept)'; a record from before a field leaves that field out."""
    parts = [f"{record.get('cores', '?')} cores"]
    if "blas_core" in record:
        kernel = record["blas_core"]
        parts.append(f"OpenBLAS {kernel}" if kernel != "?" else "OpenBLAS kernel unknown")
    if "malloc" in record:
        parts.append(malloc_words(record["malloc"]))
    cpu = record.get("cpu_model", record.get("cpu", "?"))  # sync_map's 'cpu' up to 2026-12-07
    return f"{cpu} ({', '.join(parts)})"


def machine_record(kernel, load_before):
    """The machine's part of a sitting's record (invocation.json), what its runs' times and
    arithmetic rest on: the CPU and its cores, the OpenBLAS kernel its runs load (blas_core's
    or probe_torch's), the malloc tunables the runs get ('' for glibc's defaults) and the load
    before them (load_average(), read before the kernel's probe, which may import torch)."""
    cpu_model, cores = machine()
    return dict(cpu_model=cpu_model, cores=cores, blas_core=kernel, malloc=run_malloc(),
                load_before=load_before)


def probe(argv, timeout_s=60, most_chars=160):
    """None when the command `argv` succeeds within timeout_s, else why not: its last error
    line, at most most_chars long (None: whole)."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"{os.path.basename(argv[0])} took over {timeout_s} s"
    except OSError as e:
        return f"cannot run {argv[0]}: {e.strerror}"
    if result.returncode == 0:
        return None
    lines = (result.stderr.strip() or f"exit status {result.returncode}").splitlines()
    return reason(lines[-1], most_chars)


def probe_hosts(on_hosts, link="1gbit"):
    """None when emulated hosts joined by links of this rate can be made here, else why not
    (one line)."""
    if not on_hosts or not os.access(on_hosts, os.X_OK):
        return "no --on_hosts binary"
    return probe([on_hosts, "--nprocs=2", "--hosts=2", f"--link={link}", "--", "/bin/true"])


def stop_on_signal(signum, frame):
    raise SystemExit(f"error: stopped by signal {signum}")


def parse_links(text):
    """--links as a list of rates ([] for none), or fails."""
    links = [link for link in text.split(",") if link and link != "none"]
    for link in links:
        if link != "unlimited" and not re.fullmatch(r"[0-9]+(\.[0-9]+)?[kmgt]bit", link):
            fail(f"--links: '{link}' is not unlimited or a rate such as 1gbit or 2.5gbit")
    return links


def short_command(command, out):
    """A run's command with the runfiles' paths as the checkout's and the output folder as OUT:
    what another machine runs, without this one's paths."""
    command = re.sub(r"/[^\s:=]*?\.runfiles/ringlab/", "", command)
    return command.replace(os.path.abspath(out), "OUT")


def default_out_dir(name):
    """out/<name> where the command was typed (`bazel run` says where in
    BUILD_WORKING_DIRECTORY), else in the current directory: every driver's --out_dir default."""
    return os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", os.getcwd()), "out", name)


def write_invocation(out, invocation, started):
    """<out>/invocation.json: the invocation with its duration (since time.monotonic()'s
    started) and the load after the runs."""
    invocation["duration_s"] = time.monotonic() - started
    invocation["load_after"] = load_average()
    with open(os.path.join(out, "invocation.json"), "w") as f:
        json.dump(invocation, f, indent=2)


def drive(args, out, commands, run_all_runs, build_report, report_error):
    """What every experiment driver does once its flags are checked: --dry_run prints the
    commands; else the runs run (unless --report_only) and the report is written. Returns the
    exit status: 1 when a run failed."""
    if args.dry_run:
        for argv in commands:
            print(" ".join(shlex.quote(a) for a in argv))
        return 0
    if not args.report_only:
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            fail(f"--out_dir={out} cannot be made: {e.strerror}")
        run_all_runs(args, out)
    try:
        runs = build_report(out)
    except report_error as e:
        fail(str(e))
    print(f"wrote {out}/report.md, results.csv and the plots")
    return 1 if any(r["status"].startswith("failed") for r in runs) else 0
