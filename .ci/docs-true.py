#!/usr/bin/env python3
"""Fails when the documentation no longer names what the code has:

- a crate's `pub mod` (in `src/lib.rs`) that its README does not name;
- a Prometheus metric name in the code (the contract's `metric` constants and the
  metric names the crates register) missing from the metrics table in
  `docs/observability.md`;
- a visible `loadtest` subcommand (the `Command` enum of `loadtest/src/cli/mod.rs`)
  missing from `loadtest/README.md`.

Run from the repository root. `--self-test` copies the files it reads to a scratch
directory, makes each kind of staleness once and checks that each is caught."""

import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

METRIC_SOURCES = [
    "services/libs/contract/src/telemetry.rs",
    "dashboards/trace-viewer/src/metrics.rs",
]
METRICS_DOC = "docs/observability.md"
CLI = "loadtest/src/cli/mod.rs"
CLI_DOC = "loadtest/README.md"


def crates(root):
    """(crate directory, its lib.rs) for every crate of the workspace with a library."""
    out = subprocess.run(["git", "ls-files", "*/src/lib.rs"], cwd=root, capture_output=True, text=True, check=True)
    for lib in out.stdout.split():
        yield (root / lib).parent.parent, root / lib


def unnamed_modules(root):
    for crate, lib in crates(root):
        modules = re.findall(r"^pub mod (\w+)", lib.read_text(encoding="utf-8"), re.M)
        readme = crate / "README.md"
        if not modules:
            continue
        if not readme.exists():
            yield f"{crate.relative_to(root)}: no README.md for its modules {', '.join(modules)}"
            continue
        text = readme.read_text(encoding="utf-8")
        for module in modules:
            # Named as code (`module`, `module::…`, `src/module.rs`, `src/module/`).
            if not re.search(rf"`{module}(`|::|/)|src/{module}(\.rs|/)|\[`{module}`\]", text):
                yield f"{crate.relative_to(root)}/README.md does not name its module `{module}`"


def metric_names(root):
    names = set()
    for source in METRIC_SOURCES:
        text = (root / source).read_text(encoding="utf-8")
        for name in re.findall(r'"([a-z][a-z0-9_]*)"', text):
            # The Prometheus names of this project: families of its own prefixes.
            if re.match(r"^(http_server|gateway|cosmos|otel_spans|process|trace_viewer)_", name):
                names.add(name)
    return names


def undocumented_metrics(root):
    table = (root / METRICS_DOC).read_text(encoding="utf-8")
    rows = "\n".join(line for line in table.splitlines() if line.startswith("| `"))
    for name in sorted(metric_names(root)):
        # A counter registered without its suffix is exposed with `_total`.
        if f"`{name}`" not in rows and f"`{name}_total`" not in rows:
            yield f"{METRICS_DOC}: the metrics table lacks `{name}`"


def subcommands(root):
    text = (root / CLI).read_text(encoding="utf-8")
    body = text[text.index("pub enum Command {"):]
    body = body[: body.index("\n}")]
    hidden = False
    for line in body.splitlines():
        if "hide = true" in line:
            hidden = True
            continue
        match = re.match(r"^\s+([A-Z]\w*)[({,]", line)
        if match:
            if not hidden:
                yield re.sub(r"(?<!^)([A-Z])", r"-\1", match.group(1)).lower()
            hidden = False


def undocumented_subcommands(root):
    doc = (root / CLI_DOC).read_text(encoding="utf-8")
    for command in subcommands(root):
        if not re.search(rf"loadtest(\s+--\s+|\s+){command}\b|`{command}`", doc):
            yield f"{CLI_DOC} does not describe `loadtest {command}`"


def problems(root):
    return [*unnamed_modules(root), *undocumented_metrics(root), *undocumented_subcommands(root)]


def self_test(root):
    """Each kind of staleness, made once in a copy, must be caught."""
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        copy = pathlib.Path(scratch) / "repo"
        # The working tree's tracked files as they are now, committed or not.
        listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True)
        for path in listed.stdout.split():
            if path.endswith((".rs", ".md")) and (root / path).exists():
                (copy / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(root / path, copy / path)
        subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
        subprocess.run(["git", "add", "-A"], cwd=copy, check=True)
        if problems(copy):
            failures.append(f"the copy is not clean to begin with: {problems(copy)}")
        cases = [
            ("dashboards/trace-analysis/src/lib.rs", "pub mod summary;", "pub mod summary;\npub mod brand_new_module;", "brand_new_module"),
            ("services/libs/contract/src/telemetry.rs", "pub mod metric {", 'pub mod metric {\n    pub const NEW: &str = "gateway_brand_new_total";', "gateway_brand_new_total"),
            (CLI, "pub enum Command {", "pub enum Command {\n    /// New.\n    BrandNew(NewArgs),", "brand-new"),
        ]
        for path, old, new, expected in cases:
            original = (copy / path).read_text(encoding="utf-8")
            (copy / path).write_text(original.replace(old, new, 1), encoding="utf-8")
            caught = [p for p in problems(copy) if expected in p]
            if not caught:
                failures.append(f"a stale doc went unnoticed: {expected} added to {path}")
            (copy / path).write_text(original, encoding="utf-8")
    return failures


def main():
    root = pathlib.Path.cwd()
    if "--self-test" in sys.argv:
        failures = self_test(root)
        for failure in failures:
            print(failure)
        print("the docs check catches each kind of staleness" if not failures else "the docs check missed some")
        return 1 if failures else 0
    found = problems(root)
    for problem in found:
        print(problem)
    if found:
        print(f"{len(found)} places where the docs no longer name what the code has")
        return 1
    print("every public module, metric and loadtest subcommand is documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
