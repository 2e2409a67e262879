#!/usr/bin/env python3
"""Docs that cannot drift: checks README.md and docs/*.md against the tree.

    check_docs.py --root DIR [--backends_page FILE] [--syncs_page FILE] LABEL=PATH...

- Every relative link resolves, and every repository path or Bazel label
  named in `code` exists (a path's glob matches something).
- Every --flag is a flag of the command it is shown with: in a command line
  (`bazel run //pkg:target -- ARGS`, `bazel-bin/pkg/target ARGS`,
  `python3 path.py ARGS`, and the same after mpirun, srun, torchrun or
  on_hosts' `--`) against that command's --help; in a `code` span of flags
  alone, against the binaries the page declares on its first line,
  `<!-- flags: //pkg:target ... -->`. The --help of each LABEL=PATH given is
  read once; a command not given (a CUDA binary without CUDA) is skipped,
  said once.
- Every docs/ page is linked from the README; with --repository, no tracked
  file names a path outside the repository, "the document" or an issue
  number.
- The backends page's generated block lists every backend the train binary
  describes and every variable of each (--backends_page; the block is made
  with --write_backends on a build with every backend).
- The synchronisers page's generated block is exactly the table of what
  train --list_syncs=json describes (--syncs_page; --write_syncs makes it).
- Every block between `<!-- begin included: PATH -->` and
  `<!-- end included -->` is exactly the file PATH (a table an experiment
  wrote into its results folder); --write_included copies them in.
Prints each problem as FILE:LINE: what; exits 1 when there is one.
"""
import argparse
import glob
import json
import os
import re
import shlex
import subprocess
import sys

BEGIN = "<!-- begin generated: backends -->"
END = "<!-- end generated: backends -->"
SYNCS_BEGIN = "<!-- begin generated: syncs -->"
SYNCS_END = "<!-- end generated: syncs -->"
LAUNCHERS = {"mpirun", "mpiexec", "srun", "torchrun", "timeout", "env", "sudo",
             "strace", "nsenter"}
FLAG = re.compile(r"^--([a-z][a-z0-9_]*)(=.*)?$")


def label_of(text, aliases):
    """//pkg:name for //pkg, //pkg:name or an alias."""
    if ":" not in text:
        text = text + ":" + text.rstrip("/").split("/")[-1]
    while text in aliases:
        text = aliases[text]
    return text


def read_aliases(root):
    aliases = {}
    for build in glob.glob(os.path.join(root, "**", "BUILD"), recursive=True):
        package = os.path.relpath(os.path.dirname(build), root)
        package = "" if package == "." else package
        with open(build) as f:
            text = f.read()
        for name, actual in re.findall(
                r'alias\(\s*name = "([^"]+)",\s*actual = "([^"]+)"', text):
            if actual.startswith(":"):
                actual = f"//{package}{actual}"
            aliases[f"//{package}:{name}"] = label_of(actual, {})
    return aliases


class Helps:
    """Each command's flags, from its --help, read once."""

    def __init__(self, commands, root):
        self.commands, self.root, self.flags, self.missing = commands, root, {}, set()

    def of(self, command):
        if command in self.flags:
            return self.flags[command]
        path = self.commands.get(command)
        if path is None and command.endswith(".py"):
            path = os.path.join(self.root, command)
            argv = ["/usr/bin/python3", path, "--help"]
        else:
            argv = [path, "--help"] if path else None
        if argv is None or not os.path.exists(argv[-2] if len(argv) == 3 else argv[0]):
            self.missing.add(command)
            self.flags[command] = None
            return None
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                cwd=self.root, stdin=subprocess.DEVNULL)
        text = result.stdout + result.stderr
        names = set(re.findall(r"^\s+-([a-z][a-z0-9_]*) \(", text, re.M))
        names |= set(re.findall(r"--([a-z][a-z0-9_]*)", text))
        self.flags[command] = names | {"help"}
        return self.flags[command]


def check_flags(tokens, command, helps, where, problems):
    known = helps.of(command)
    if known is None:
        return
    for token in tokens:
        match = FLAG.match(token)
        if not match:
            continue
        name = match.group(1)
        if name in known or (name.startswith("no") and name[2:] in known):
            continue
        problems.append(f"{where}: {token} is not a flag of {command}")


def check_command(words, helps, aliases, where, problems):
    """Checks the flags of one command line (already split into words)."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]
    if not words:
        return
    first = words[0]
    if first == "bazel":
        if len(words) > 2 and words[1] == "run":
            targets = [w for w in words if re.fullmatch(r"//[A-Za-z0-9_/:.\-]*", w)]
            rest = words[words.index("--") + 1:] if "--" in words else []
            command = []
            if "--" in rest:  # compare [flags] -- COMMAND: the command is checked as its own
                rest, command = rest[:rest.index("--")], rest[rest.index("--") + 1:]
            if targets:
                check_flags(rest, label_of(targets[0], aliases), helps, where, problems)
            check_command(command, helps, aliases, where, problems)
        return
    if first.startswith("bazel-bin/"):
        label = label_of("//" + os.path.dirname(first[len("bazel-bin/"):]) + ":" +
                         os.path.basename(first), aliases)
        own = words[1:words.index("--")] if "--" in words else words[1:]
        check_flags(own, label, helps, where, problems)
        if "--" in words:  # on_hosts [flags] -- COMMAND
            check_command(words[words.index("--") + 1:], helps, aliases, where, problems)
        return
    if os.path.basename(first) in ("python3", "python") and len(words) > 1:
        script = words[1]
        # A user's own script is theirs; one of the repository's must exist.
        if script.endswith(".py") and os.path.exists(os.path.join(helps.root,
                                                                  script.split("/")[0])):
            if not os.path.isfile(os.path.join(helps.root, script)):
                problems.append(f"{where}: {script} does not exist")
            else:
                check_flags(words[2:], script, helps, where, problems)
        return
    if os.path.basename(first) in LAUNCHERS:
        for i, word in enumerate(words[1:], 1):
            if word.startswith("bazel-bin/") or os.path.basename(word) == "python3":
                check_command(words[i:], helps, aliases, where, problems)
                return


def split_commands(line):
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        words = line.split()
    commands, current = [], []
    for word in words:
        if word in ("&&", "||", ";", "|", "&"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    return commands + [current]


def declared_binaries(text, aliases):
    first = text.splitlines()[0] if text else ""
    match = re.match(r"<!-- flags: (.*) -->", first)
    return [label_of(label, aliases) for label in match.group(1).split()] if match else None


def check_span(span, page_binaries, helps, aliases, where, problems):
    words = span.split()
    if not words:
        return
    if all(w == "--" or w.startswith("--") for w in words):
        flags = [w for w in words if w != "--"]
        if not flags or flags == ["--help"]:
            return
        if page_binaries is None:
            problems.append(f"{where}: `{span}` names flags, and the page declares no "
                            "binaries (<!-- flags: ... --> on its first line)")
            return
        for flag in flags:
            if not FLAG.match(flag):
                continue
            owners = [b for b in page_binaries if helps.of(b) is not None]
            name = FLAG.match(flag).group(1)
            if any(name in helps.of(b) or (name.startswith("no") and name[2:] in helps.of(b))
                   for b in owners):
                continue
            if len(owners) < len(page_binaries):
                continue  # perhaps the one not built here has it: said once
            problems.append(f"{where}: {flag} is a flag of none of "
                            f"{' '.join(page_binaries)}")
        return
    for command in split_commands(span):
        check_command(command, helps, aliases, where, problems)


def check_path(span, root, where, problems):
    """A repository path or Bazel label named in code must exist."""
    if span.startswith("//") and ("..." in span or "__" in span):
        return  # a pattern or a visibility
    if re.fullmatch(r"//[A-Za-z0-9_/.\-]*(:[A-Za-z0-9_.\-]+)?", span):
        package = span[2:].split(":")[0].rstrip("/")
        if not os.path.isfile(os.path.join(root, package, "BUILD")):
            problems.append(f"{where}: no Bazel package //{package}")
        elif ":" in span and not span.endswith(":all"):
            name = span.split(":")[1]
            with open(os.path.join(root, package, "BUILD")) as f:
                build = f.read()
            if f'name = "{name}"' not in build and f'"{name}"' not in build:
                problems.append(f"{where}: no target {span}")
        return
    if span.startswith("/") or not re.fullmatch(r"[A-Za-z0-9_.\-*/]+/[A-Za-z0-9_.\-*/]*",
                                                  span):
        return
    top = span.split("/")[0]
    if top in ("bazel-bin", "out", "tmp") or not os.path.exists(os.path.join(root, top)):
        return
    if not glob.glob(os.path.join(root, span.rstrip("/"))):
        problems.append(f"{where}: `{span}` does not exist")


def check_page(path, root, helps, aliases, problems):
    with open(path) as f:
        text = f.read()
    page_binaries = declared_binaries(text, aliases)
    name = os.path.relpath(path, root)
    in_block, pending = False, ""
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        if line.lstrip().startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if in_block:
            pending += line.rstrip("\\") + " "
            if not line.endswith("\\"):
                for command in split_commands(pending):
                    check_command(command, helps, aliases, where, problems)
                pending = ""
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            resolved = os.path.join(os.path.dirname(path), target.split("#")[0])
            if not os.path.exists(resolved):
                problems.append(f"{where}: the link {target} leads nowhere")
        for span in re.findall(r"`([^`]+)`", line):
            check_span(span, page_binaries, helps, aliases, where, problems)
            check_path(span.strip(), root, where, problems)


def parse_backends(help_text):
    """[(name, summary, [variable lines])] from train's --help."""
    backends, current = [], None
    section = help_text.split("backends in this binary (--comm):", 1)
    if len(section) < 2:
        return backends
    for line in section[1].splitlines():
        if not line.strip():
            if backends or current:
                break
            continue
        if line.startswith("      "):
            if current:
                current[2].append(line.strip())
        elif line.startswith("  "):
            name, _, summary = line.strip().partition(": ")
            current = (name.rstrip(":"), summary, [])
            backends.append(current)
    return backends


def backends_table(backends):
    rows = ["| backend | what it is | its variables (range, default: meaning) |",
            "|---|---|---|"]
    for name, summary, variables in backends:
        label = f"`{name}`" if " " not in name else name
        cells = "<br>".join(
            re.sub(r"^(RINGLAB_[A-Z0-9_]+)", r"`\1`", v).replace("|", "\\|")
            for v in variables) or "none"
        rows.append(f"| {label} | {summary.replace('|', '/')} | {cells} |")
    return "\n".join(rows)


def generated_block(page, begin, end, table, write, problems):
    """The page's text between begin and end; with write, the table is put there instead and
    None returned (None too, and a problem, where the markers are missing)."""
    with open(page) as f:
        text = f.read()
    if begin not in text or end not in text:
        problems.append(f"{page}: no {begin} ... {end} block")
        return None
    head, rest = text.split(begin, 1)
    block, tail = rest.split(end, 1)
    if not write:
        return block
    with open(page, "w") as f:
        f.write(head + begin + "\n" + table + "\n" + end + tail)
    return None


def check_backends(page, train, problems, write):
    help_text = subprocess.run([train, "--help"], capture_output=True, text=True,
                               timeout=120).stdout
    backends = parse_backends(help_text)
    if not backends:
        problems.append(f"{train} --help lists no backends")
        return
    block = generated_block(page, BEGIN, END, backends_table(backends), write, problems)
    if block is None:
        return
    for name, _, variables in backends:
        if name.startswith("every "):
            name = None
        if name and f"| `{name}` |" not in block:
            problems.append(f"{page}: the backends table has no row for {name} "
                            "(tools/docs/check_docs.py --write_backends remakes it)")
        for variable in variables:
            var = variable.split()[0]
            if f"`{var}`" not in block:
                problems.append(f"{page}: the backends table lacks {var} "
                                f"({name or 'the front'})")


def syncs_table(syncs):
    """The synchronisers page's table from train --list_syncs=json."""
    rows = ["| `--sync=` | what it does | what it sends | PyTorch counterpart | "
            "its options (default, range: meaning) |", "|---|---|---|---|---|"]
    for sync in syncs:
        options = "<br>".join(f"`--{o['name']}={o['default']}` {o['range']}: {o['help']}"
                              for o in sync["options"]) or "none"
        cells = [f"`{sync['name']}`", sync["summary"], sync["sends"], sync["pytorch"], options]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def check_syncs(page, train, problems, write):
    """The block between SYNCS_BEGIN and SYNCS_END is exactly what the trainer's synchronisers
    describe of themselves (--write_syncs remakes it)."""
    listed = subprocess.run([train, "--list_syncs=json"], capture_output=True, text=True,
                            timeout=120)
    try:
        table = syncs_table(json.loads(listed.stdout))
    except (ValueError, KeyError, TypeError) as e:
        problems.append(f"{train} --list_syncs=json: not the synchronisers' list ({e})")
        return
    block = generated_block(page, SYNCS_BEGIN, SYNCS_END, table, write, problems)
    if block is not None and block.strip() != table.strip():
        problems.append(f"{page}: the synchronisers table is not what train --list_syncs=json "
                        "says (tools/docs/check_docs.py --write_syncs remakes it)")


# What no file of the repository may say: a path outside it, a document the
# reader does not have, an issue tracker's number.
FORBIDDEN = [(re.compile(r"\.\./shared|/work/"), "a path outside the repository"),
             (re.compile(r"\bthe document\b", re.I), "'the document' (say which)"),
             (re.compile(r"\bissues? #?[0-9]+\b", re.I), "an issue number")]


def check_repository(root, problems):
    """Every tracked text file but this checker's own, against FORBIDDEN."""
    listed = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True)
    if listed.returncode != 0:
        problems.append(f"git ls-files in {root} failed: "
                        f"{listed.stderr.decode(errors='replace').strip()}")
        return
    files = listed.stdout.decode().split("\0")
    own = {"tools/docs/check_docs.py", "tools/docs/check_docs_test.py"}
    for name in files:
        path = os.path.join(root, name)
        if not name or name in own or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            for pattern, what in FORBIDDEN:
                if pattern.search(line):
                    problems.append(f"{name}:{number}: names {what}: {line.strip()[:80]}")


def check_reachable(root, problems):
    """Every docs/ page is linked from the README."""
    with open(os.path.join(root, "README.md")) as f:
        linked = {os.path.normpath(t.split("#")[0])
                  for t in re.findall(r"\]\(([^)\s]+)\)", f.read())}
    for page in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        if os.path.relpath(page, root) not in linked:
            problems.append(f"README.md: no link to {os.path.relpath(page, root)}")


INCLUDED = re.compile(r"(<!-- begin included: (\S+) -->\n)(.*?)(<!-- end included -->)",
                      re.S)


def check_included(page, root, problems, write):
    """Each included block of the page is its file's text (with write, made so)."""
    with open(page) as f:
        text = f.read()

    def included(match):
        path = os.path.join(root, match.group(2))
        if not os.path.isfile(path):
            problems.append(f"{page}: the included {match.group(2)} does not exist")
            return match.group(0)
        with open(path) as f:
            wanted = f.read().strip() + "\n"
        if match.group(3) != wanted and not write:
            problems.append(f"{page}: the block included from {match.group(2)} differs from "
                            f"the file (--write_included copies it)")
        return match.group(1) + wanted + match.group(4)

    remade = INCLUDED.sub(included, text)
    if write and remade != text:
        with open(page, "w") as f:
            f.write(remade)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--backends_page", help="docs/backends.md, checked against train")
    parser.add_argument("--write_backends", action="store_true",
                        help="remake the backends page's generated block instead")
    parser.add_argument("--syncs_page", help="docs/synchronizers.md, checked against train")
    parser.add_argument("--write_syncs", action="store_true",
                        help="remake the synchronisers page's generated block instead")
    parser.add_argument("--write_included", action="store_true",
                        help="copy each included file into its block instead")
    parser.add_argument("--repository", action="store_true",
                        help="also check every tracked file (git ls-files) for what "
                             "none may name")
    parser.add_argument("commands", nargs="*", help="LABEL=PATH of each binary")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    aliases = read_aliases(root)
    commands = {label_of(k, aliases): os.path.abspath(v)
                for k, v in (c.split("=", 1) for c in args.commands)}
    helps = Helps(commands, root)
    problems = []
    pages = [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "*.md")))
    for page in pages:
        check_page(page, root, helps, aliases, problems)
        check_included(page, root, problems, args.write_included)
    check_reachable(root, problems)
    if args.repository:
        check_repository(root, problems)
    if args.backends_page:
        check_backends(os.path.join(root, args.backends_page), commands["//train:train"],
                       problems, args.write_backends)
    if args.syncs_page:
        check_syncs(os.path.join(root, args.syncs_page), commands["//train:train"], problems,
                    args.write_syncs)
    for command in sorted(helps.missing):
        print(f"skipped: the flags of {command}, not built here")
    for problem in problems:
        print(problem)
    print(f"check_docs: {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
