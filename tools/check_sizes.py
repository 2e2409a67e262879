#!/usr/bin/env python3
"""Size limits of ringlab's sources: no function over 100 lines, no non-test
file over 600 lines, in the C++ and in the Python.

    tools/check_sizes.py [--max_function_lines=100] [--max_file_lines=600] [DIR...]

DIRs default to the C++ packages (nn comm sync trace train bench cuda io torch_compat
torch_backend cli) and the Python ones (experiments tools). Prints one line per function or file over
its limit and exits 1 when there is any, 0 otherwise.

Python functions (.py) are found with the ast module: a function's length counts its
lines from its first decorator (or its `def`) to its last line; a method is named
Class.method, a function defined in another outer.inner, and each counts toward the one
that contains it as well. A .py file that does not parse is a problem too.

Functions are found in .h/.cc/.cu files by a brace-matching scan, not a
parser: comments, string and character literals and preprocessor lines are
blanked first; a `{` at namespace or class scope opens a function body when
the text before it (since the last `;`, `{` or `}` at that scope) has a
parameter list and is not a namespace, class, struct, union, enum or an
initialiser (`= ...`, `name{...}`). A function's length counts its lines from
the first line of its signature to its closing brace. Lambdas and local
classes count as part of the function that contains them. A test file
(`*_test.*`, or anything under `testdata/`) is exempt from the file limit, not
from the function limit (a TEST body is a function).
"""
import argparse
import ast
import os
import re
import sys

DEFAULT_DIRS = ["nn", "comm", "sync", "trace", "train", "bench", "cuda", "io", "torch_compat",
                "cli", "torch_backend", "experiments", "tools"]
CODE_EXTENSIONS = (".h", ".cc", ".cu", ".cuh")
PYTHON_EXTENSIONS = (".py",)
FILE_EXTENSIONS = CODE_EXTENSIONS + PYTHON_EXTENSIONS + (".sh",)
SCOPE_RE = re.compile(r"^(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b", re.S)


def blank_noncode(text):
    """Replaces comments, literals and preprocessor lines by spaces, keeping
    every newline, so that offsets and line numbers stay those of the file."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            j = i
            while j < n and not (text[j] == "\n" and text[j - 1] != "\\"):
                j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m is None:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c == "'" and re.search(r"\b\d[\w']*$", text[max(0, i - 40):i]):
            out.append(c)  # a digit separator: 1'000'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def depth0_parens(header):
    """(text before the first '(' at depth 0, text after the last ')' at depth 0)."""
    first, last, depth = None, None, 0
    for k, ch in enumerate(header):
        if ch == "(":
            if depth == 0 and first is None:
                first = k
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                last = k
    if first is None or last is None:
        return None, None
    return header[:first], header[last + 1:]


def classify(header):
    """'scope', 'func' or 'block' for a `{` at namespace/class scope."""
    h = header.strip()
    if SCOPE_RE.match(h):
        return "scope"
    before, after = depth0_parens(h)
    if before is None:
        return "block"  # `T x{...}`, `= {...}` and the like
    if re.search(r"\boperator\b", before):
        return "func"
    if re.search(r"(?<![=!<>])=(?!=)", before):
        return "block"  # an initialiser: `auto f = [](...) {`, `int a[] = {`
    if re.match(r"\s*:(?!:)", after):
        # A constructor's initialiser list: its body follows `)` or `}`;
        # anything else is a member's brace initialiser.
        return "func" if h.endswith(")") or h.endswith("}") else "block"
    if re.fullmatch(r"(\s|const|volatile|override|final|noexcept(\(.*\))?|&|&&|->[\w:<>,\s*&]+|try)*", after, re.S):
        return "func"
    return "block"


def function_name(header):
    before, _ = depth0_parens(header.strip())
    op = re.search(r"[\w:]*\boperator\b\s*\S*", before or "")
    if op:
        return op.group(0)
    words = re.findall(r"[~\w:]+", before or "")
    name = words[-1] if words else "?"
    if re.fullmatch(r"(TEST|TEST_F|TEST_P|TYPED_TEST)", name):
        m = re.search(r"\(([^)]*)\)", header)
        name += "(" + (m.group(1).strip() if m else "") + ")"
    return name


def functions(text):
    """(name, first line, last line) of every function body in text."""
    code = blank_noncode(text)
    stack = []  # (kind, first line, name) of every open brace
    stmt_start = 0  # where the statement at scope level began
    found = []
    line = 1
    for k, ch in enumerate(code):
        at_scope = all(kind == "scope" for kind, _, _ in stack)
        if ch == "\n":
            line += 1
        elif ch == "{":
            if not at_scope:
                stack.append(("block", line, ""))
                continue
            header = code[stmt_start:k]
            kind = classify(header)
            first = line - header.lstrip().count("\n")
            stack.append((kind, first, function_name(header) if kind == "func" else ""))
            if kind != "block":
                stmt_start = k + 1
        elif ch == "}" and stack:
            kind, first, name = stack.pop()
            if kind == "func":
                found.append((name, first, line))
            # Back at scope level, a new statement starts after a body; after a
            # brace initialiser the statement goes on (`: a_{1}, b_(2) {`).
            if kind != "block" and all(kd == "scope" for kd, _, _ in stack):
                stmt_start = k + 1
        elif ch == ";" and at_scope:
            stmt_start = k + 1
    return found


def python_functions(text):
    """(name, first line, last line) of every function and method in Python source text,
    in the order they begin; raises SyntaxError where it does not parse."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                found.append((prefix + child.name, first, child.end_lineno))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return sorted(found, key=lambda f: (f[1], f[0]))


def is_test_file(path):
    base = os.path.basename(path)
    return "_test." in base or "/testdata/" in "/" + path


def check(dirs, max_function_lines, max_file_lines):
    problems = []
    for top in dirs:
        for root, _, files in os.walk(top):
            for f in sorted(files):
                path = os.path.join(root, f)
                if not f.endswith(FILE_EXTENSIONS) or "/testdata/" in "/" + path:
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                lines = text.count("\n")
                if not is_test_file(path) and lines > max_file_lines:
                    problems.append(f"{path}: {lines} lines (limit {max_file_lines})")
                if f.endswith(PYTHON_EXTENSIONS):
                    try:
                        found = python_functions(text)
                    except SyntaxError as e:
                        problems.append(f"{path}:{e.lineno}: does not parse: {e.msg}")
                        continue
                elif f.endswith(CODE_EXTENSIONS):
                    found = functions(text)
                else:
                    continue
                for name, first, last in found:
                    length = last - first + 1
                    if length > max_function_lines:
                        problems.append(f"{path}:{first}: {name} is {length} lines "
                                        f"(limit {max_function_lines})")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max_function_lines", type=int, default=100)
    parser.add_argument("--max_file_lines", type=int, default=600)
    parser.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    args = parser.parse_args(argv)
    # The default list names packages that may not exist yet; named ones must.
    explicit = argv and any(not a.startswith("--") for a in argv)
    missing = [d for d in args.dirs if not os.path.isdir(d)]
    if not explicit:
        args.dirs = [d for d in args.dirs if os.path.isdir(d)]
    elif missing:
        print("error: no such directory: " + ", ".join(missing), file=sys.stderr)
        return 2
    problems = check(args.dirs, args.max_function_lines, args.max_file_lines)
    for p in problems:
        print(p)
    print(f"check_sizes: {len(problems)} over the limits in {' '.join(args.dirs)}",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
