#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (default 80 lines) in Monta's own code.

A function may be longer when a comment within the three lines above its first line
says why, starting with `// long-function:`. Usage:

  scripts/check_function_length.py [--max-lines N] [DIR ...]   # default: every room

Exits 1 (naming each function, its file, line and length) when any is over the limit.
The parser is a brace tracker over comment- and string-free text: a `{` opens a function
body when it follows `)` (plus qualifiers, an initializer list or a trailing return type)
at namespace or class scope. Lambdas and local blocks count toward their function.
"""

import argparse
import os
import re
import sys

ROOMS = ["agent", "server", "client", "common", "perf", "tests"]
REASON = "long-function:"


def strip_code(text):
    """Replaces comments and string/char literals with spaces, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
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
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNCTION_TAIL = re.compile(
    r"\)\s*(const|override|final|noexcept|mutable|&|&&|\s)*"
    r"(->\s*[\w:<>,\s*&]+)?\s*$")


def opens_function(prefix):
    """Whether a `{` after `prefix` (text since the last ; { or }) opens a body."""
    p = re.sub(r"\s+", " ", prefix).strip()
    if not p or re.search(r"\b(namespace|class|struct|union|enum)\b", p.split("(")[0]):
        return False
    if p.startswith("#") or p.endswith("=") or p.startswith("extern \"C\""):
        return False
    if FUNCTION_TAIL.search(p):
        return True
    # Constructor initializer list: `Foo::Foo(int a) : x_(a), y_{b}` ends with ) or }.
    return bool(re.search(r"\)\s*:\s*[\w:]+[({]", p)) and p.endswith(")")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    code = strip_code(raw)
    raw_lines = raw.split("\n")
    stack = []  # (kind, start_offset)
    last_break = 0
    results = []
    for i, c in enumerate(code):
        if c == "{":
            in_function = any(kind == "function" for kind, _ in stack)
            prefix = code[last_break:i]
            kind = "block"
            if not in_function and opens_function(prefix):
                kind = "function"
            elif not in_function:
                kind = "scope"
            start = last_break + (len(prefix) - len(prefix.lstrip()))
            stack.append((kind, start if kind == "function" else i))
            last_break = i + 1
        elif c == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "function":
                    first = code.count("\n", 0, start) + 1
                    last = code.count("\n", 0, i) + 1
                    name = re.sub(r"\s+", " ", code[start:code.find("(", start)]).strip()
                    results.append((first, last - first + 1, name.split(" ")[-1]))
            last_break = i + 1
        elif c == ";":
            last_break = i + 1
    for first, length, name in results:
        above = raw_lines[max(0, first - 4):first]
        yield first, length, name, any(REASON in line for line in above)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-lines", type=int, default=80)
    parser.add_argument("dirs", nargs="*")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = args.dirs or [os.path.join(root, d) for d in ROOMS]
    over = []
    excused = 0
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames[:] = [x for x in dirnames if not x.startswith(".") and x != "node_modules"]
            for fn in sorted(filenames):
                if not fn.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, fn)
                for first, length, name, has_reason in functions(path):
                    if length <= args.max_lines:
                        continue
                    if has_reason:
                        excused += 1
                        continue
                    over.append((os.path.relpath(path, root), first, length, name))
    for path, first, length, name in sorted(over):
        print(f"{path}:{first}: {name} is {length} lines (limit {args.max_lines}); "
              f"split it into named steps or say why above it with `// {REASON} ...`")
    print(f"function length: {len(over)} over {args.max_lines} lines, "
          f"{excused} longer with a stated reason")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
