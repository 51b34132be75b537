#!/usr/bin/env python3
"""Fails when a Markdown file's relative link points at a file that does not exist, or
at a heading anchor that file does not have (GitHub's slugs: lower case, punctuation
dropped, spaces as hyphens, repeats numbered). Run from the repository root; prints
every broken link as `file:line: link`."""

import pathlib
import re
import subprocess
import sys

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def tracked_markdown():
    out = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, check=True)
    return [pathlib.Path(p) for p in out.stdout.split()]


def slug(heading):
    text = re.sub(r"`|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen, fenced = set(), {}, False
        for line in path.read_text(encoding="utf-8").splitlines():
            if FENCE.match(line):
                fenced = not fenced
                continue
            match = re.match(r"^#{1,6}\s+(.*)$", line)
            if match and not fenced:
                base = slug(match.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def broken_links(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("//"):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path.resolve()
            root = pathlib.Path.cwd().resolve()
            if not linked.exists():
                yield number, target, "no such file"
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.relative_to(root)):
                yield number, target, "no such heading"


def main():
    failures = [
        f"{path}:{number}: {target} ({why})"
        for path in tracked_markdown()
        for number, target, why in broken_links(path)
    ]
    for failure in failures:
        print(failure)
    if failures:
        print(f"{len(failures)} broken documentation links")
        return 1
    print("every relative documentation link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
