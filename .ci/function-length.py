#!/usr/bin/env python3
"""Fails if a non-test Rust function is longer than the limit (90 lines by default).

A function runs from its `fn` line to the line of its closing brace. Test code is left
out: files under `tests/`, `examples/` and `fuzz/`, and `#[cfg(test)]` modules. Braces
inside strings, chars and comments are skipped well enough for this code base.
"""
import glob
import re
import sys

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 90
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def code(line):
    """The line without string and char literals and trailing comments."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//", 1)[0]


def functions(path):
    """(name, first line, last line) of every function outside test modules."""
    lines = open(path, encoding="utf-8").read().split("\n")
    test_module_depth = None
    pending_cfg_test = False
    depth = 0
    open_fns = []  # [name, start line, depth at the fn line, body entered]
    for number, raw in enumerate(lines, 1):
        line = code(raw)
        stripped = line.strip()
        if "#[cfg(test)]" in raw:
            pending_cfg_test = True
        elif pending_cfg_test and re.match(r"^(pub\s+)?mod\s+\w+", stripped):
            test_module_depth = depth
            pending_cfg_test = False
        elif pending_cfg_test and stripped and not stripped.startswith("#"):
            pending_cfg_test = False
        match = FN.match(line)
        if match and test_module_depth is None:
            open_fns.append([match.group(6), number, depth, False])
        for ch in line:
            if ch == "{":
                depth += 1
                if open_fns and depth == open_fns[-1][2] + 1:
                    open_fns[-1][3] = True
            elif ch == "}":
                depth -= 1
                if open_fns and open_fns[-1][3] and depth == open_fns[-1][2]:
                    name, start, _, _ = open_fns.pop()
                    yield name, start, number
            elif ch == ";" and open_fns and not open_fns[-1][3] and depth == open_fns[-1][2]:
                open_fns.pop()  # a declaration without a body
        if test_module_depth is not None and depth <= test_module_depth and "}" in line:
            test_module_depth = None


def main():
    too_long = []
    longest = (0, "")
    for path in glob.glob("**/src/**/*.rs", recursive=True):
        if path.startswith(("fuzz/", "target/")) or "/tests/" in path or "/examples/" in path:
            continue
        for name, start, end in functions(path):
            length = end - start + 1
            if length > longest[0]:
                longest = (length, f"{path}:{start} {name}")
            if length > LIMIT:
                too_long.append(f"{path}:{start} {name}: {length} lines")
    print(f"longest non-test function: {longest[1]}, {longest[0]} lines (limit {LIMIT})")
    if too_long:
        print("\n".join(too_long))
        sys.exit(1)


main()
