#!/usr/bin/env python3
"""Prints `-p NAME` for every workspace package that has an ignored test.

CI runs the ignored tests (they need a tool or minutes) in release. Building the release
test harnesses of every crate for that took several minutes, most of them for crates
with no ignored test; this selects the packages from the sources instead, so a new
ignored test anywhere is run without anyone updating a list. A file belongs to the
package whose directory holds it most closely (packages nest: `loadtest/loadgen`).

Usage: cargo metadata --no-deps --format-version 1 | ignored-test-packages.py
"""
import json
import os
import re
import sys

IGNORED = re.compile(r"#\[ignore\b")


def packages(metadata):
    """(directory, name) of every workspace package, deepest directory first."""
    found = [
        (os.path.dirname(p["manifest_path"]), p["name"]) for p in metadata["packages"]
    ]
    return sorted(found, key=lambda entry: len(entry[0]), reverse=True)


def owner(path, by_directory):
    for directory, name in by_directory:
        if path.startswith(directory + os.sep):
            return name
    return None


def main():
    metadata = json.load(sys.stdin)
    by_directory = packages(metadata)
    with_ignored = set()
    for folder, subfolders, files in os.walk(metadata["workspace_root"]):
        subfolders[:] = [s for s in subfolders if s not in ("target", ".git")]
        for file in (f for f in files if f.endswith(".rs")):
            path = os.path.join(folder, file)
            with open(path, encoding="utf-8") as source:
                if IGNORED.search(source.read()):
                    with_ignored.add(owner(path, by_directory))
    selected = sorted(with_ignored - {None})
    if not selected:
        sys.exit("no package has an ignored test: nothing for the system lane to run")
    print(" ".join(f"-p {name}" for name in selected))


if __name__ == "__main__":
    main()
