"""Bad input as every command of the kit reports it: one stderr line `error: <message>`, exit
status 2, before any work starts (no process started, nothing written).

ArgumentParser turns argparse's own complaints (an unknown flag, a value that does not parse, a
missing required flag, exclusive flags together) into that line instead of a usage block; the
checks below find a value that parses but cannot be used, and look without touching: an output
directory is checked without being made, an output file without being written.

The experiments import it by path (their directory's parent), as they run from a checkout or
from Bazel's runfiles:

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import cli_errors
"""

import argparse
import math
import os
import sys


def fail(message):
    """Prints `error: <message>` (one line) to stderr and exits with status 2."""
    line = " ".join(str(message).split())
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one `error:` line and exit status 2 (--help is unchanged).
    Flags are matched whole: an abbreviation is an unknown flag, not a guess."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):  # as the kit's C++ commands name them
            message = "; ".join(f"unknown flag {word}" if word.startswith("-") else
                                f"unexpected argument '{word}'"
                                for word in message[len(prefix):].split())
        fail(message)


def _shown(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def positive_finite(flag, value, maximum=None):
    """value when it is a finite number above 0 (and at most maximum), else fails."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0
            and (maximum is None or value <= maximum)):
        bound = f"(0, {_shown(maximum)}]" if maximum is not None else "(0, inf)"
        fail(f"{flag}={_shown(value)} is not in {bound}")
    return value


def non_negative_finite(flag, value):
    """value when it is a finite number at or above 0, else fails."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        fail(f"{flag}={_shown(value)} is not a finite number >= 0")
    return value


def int_in_range(flag, value, low, high):
    """value when low <= value <= high, else fails."""
    if not low <= value <= high:
        fail(f"{flag}={value} is not in [{low}, {high}]")
    return value


def _takes_files(directory):
    """None when files can be made in the existing directory, else why not. Looks only: the
    permission and a read-only mount (access(2) reports both, for root too), and a filesystem
    that holds no files (/proc, /sys: no blocks)."""
    if not os.access(directory, os.W_OK | os.X_OK):
        return "not writable"
    try:
        if os.statvfs(directory).f_blocks == 0:
            return "on a filesystem that holds no files"
    except OSError as e:
        return e.strerror
    return None


def output_dir(flag, path):
    """The absolute path of an output directory that is a writable directory, or absent with
    its nearest existing ancestor a writable directory (so that it can be made); else fails.
    Nothing is made or written."""
    if not path:
        fail(f"{flag} is empty")
    out = os.path.abspath(path)
    if os.path.lexists(out) and not os.path.exists(out):
        fail(f"{flag}={path} is a dangling symbolic link")
    if os.path.exists(out):
        if not os.path.isdir(out):
            fail(f"{flag}={path} is not a directory")
        why = _takes_files(out)
        if why:
            fail(f"{flag}={path} is {why}")
        return out
    ancestor = os.path.dirname(out)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        fail(f"{flag}={path} cannot be made: {ancestor} is not a directory")
    why = _takes_files(ancestor)
    if why:
        fail(f"{flag}={path} cannot be made: {ancestor} is {why}")
    return out


def output_file(flag, path, suffixes=None):
    """The absolute path of a file to write whose directory exists and takes files, and which
    is not a directory (nor an existing file it may not write); else fails. suffixes: the
    extensions allowed (lower case, without the dot; '' for none)."""
    if not path:
        fail(f"{flag} is empty")
    out = os.path.abspath(path)
    directory = os.path.dirname(out)
    if suffixes is not None:
        suffix = os.path.splitext(out)[1].lower().lstrip(".")
        if suffix not in suffixes:
            fail(f"{flag}={path}: .{suffix} is not one of "
                 f"{', '.join('.' + s for s in sorted(suffixes) if s)}")
    if os.path.isdir(out):
        fail(f"{flag}={path} is a directory")
    if not os.path.isdir(directory):
        fail(f"{flag}={path}: no such directory {directory}")
    why = _takes_files(directory)
    if why:
        fail(f"{flag}={path}: its directory {directory} is {why}")
    if os.path.exists(out) and not (os.path.isfile(out) and os.access(out, os.W_OK)):
        fail(f"{flag}={path} is not a regular file it may write")
    return out


def input_dir(flag, path, files=()):
    """The absolute path of an existing, readable directory holding every one of files
    (relative paths); else fails."""
    directory = _absolute(flag, path)
    if not os.path.exists(directory):
        fail(f"{flag}={path}: no such directory")
    if not os.path.isdir(directory):
        fail(f"{flag}={path} is not a directory")
    if not os.access(directory, os.R_OK | os.X_OK):
        fail(f"{flag}={path} is not readable")
    missing = [f for f in files if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        fail(f"{flag}={path} lacks {', '.join(missing[:3])}{more}")
    return directory


def torch_module(flag, path):
    """The absolute path of a directory holding ringlab_torch.so (Bazel's
    //torch_backend:ringlab_torch); else fails."""
    if not path or not os.path.isfile(os.path.join(path, "ringlab_torch.so")):
        fail(f"{flag}={path} holds no ringlab_torch.so (bazel build -c opt "
             f"//torch_backend:ringlab_torch, where libtorch-dev is installed)")
    return os.path.abspath(path)


def _absolute(flag, path):
    """The absolute path of a path given to flag; fails when it is empty."""
    if not path:
        fail(f"{flag} is empty")
    return os.path.abspath(path)


def input_file(flag, path):
    """The absolute path of an existing, readable regular file; else fails."""
    name = _absolute(flag, path)
    if not os.path.exists(name):
        fail(f"{flag}={path}: no such file")
    if not os.path.isfile(name):
        fail(f"{flag}={path} is not a regular file")
    if not os.access(name, os.R_OK):
        fail(f"{flag}={path} is not readable")
    return name


def executable(flag, path):
    """The absolute path of an existing regular file it may execute; else fails."""
    name = _absolute(flag, path)
    if not os.path.isfile(name) or not os.access(name, os.X_OK):
        fail(f"{flag}={path} is not an executable file")
    return name


def subset(flag, known, kind=str):
    """An argparse type: a comma-separated subset of `known`, each name made a `kind`."""
    def parse(text):
        chosen = [n for n in text.split(",") if n]
        unknown = [n for n in chosen if n not in known]
        if unknown or not chosen:
            fail(f"{flag}={text}: {'unknown ' + ', '.join(unknown) if unknown else 'none named'}"
                 f" (known: {', '.join(known)})")
        return [kind(n) for n in chosen]
    return parse
