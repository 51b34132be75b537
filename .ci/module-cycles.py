#!/usr/bin/env python3
"""Fails if a crate's top-level modules import each other in a circle.

A module is a file or folder directly under a crate's `src/`; an edge is a `crate::name`
path in its files. Test modules are included: a test that needs a circle points at a
missing module of its own.
"""
import glob
import os
import re
import sys


def top_module(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    return None if parts[0] in ("lib", "main") else parts[0]


def edges(src):
    graph = {}
    for path in glob.glob(os.path.join(src, "**", "*.rs"), recursive=True):
        module = top_module(src, path)
        if module is None:
            continue
        text = open(path, encoding="utf-8").read()
        used = set(re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", text))
        for group in re.findall(r"\buse crate::\{([^}]*)\}", text):
            used |= set(re.findall(r"\b([a-z_][a-z0-9_]*)\b", group))
        graph.setdefault(module, set()).update(used - {module})
    return graph


def cycle(graph):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


failed = False
for manifest in sorted(glob.glob("**/Cargo.toml", recursive=True)):
    src = os.path.join(os.path.dirname(manifest), "src")
    if "target" in manifest.split(os.sep) or not os.path.isdir(src):
        continue
    found = cycle(edges(src))
    if found:
        failed = True
        print(f"{src}: modules import each other in a circle: {' -> '.join(found)}")
sys.exit(1 if failed else 0)
