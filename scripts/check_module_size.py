#!/usr/bin/env python3
"""The module size cap of CONTRIBUTING.md ("Rules"): no Python module over 600 lines.

``scripts/check_module_size.py [--cap N] [PATH ...]`` (default: ``deploy_suite``; symlinks
are followed, so the top-level ``plugins/`` and ``fixtures/`` are checked through the package too,
each file once, named where it really is). One line per module over the cap; exit status 1 if any, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

CAP = 600
DEFAULT_ROOTS = ("deploy_suite",)


def shown(path: Path) -> Path:
    """Where the file really is, relative to the working directory when inside it: a module of
    ``plugins/`` is named there, not through the ``deploy_suite/plugins`` link."""
    real = path.resolve()
    try:
        return real.relative_to(Path.cwd().resolve())
    except ValueError:
        return real


def modules(roots: Sequence[Path]) -> Iterator[Path]:
    """Every ``*.py`` under ``roots`` (a file root is itself), each real file once, sorted."""
    seen: set[Path] = set()
    found: list[Path] = []
    for root in roots:
        if root.is_file():
            candidates = [root]
        else:
            candidates = [Path(d) / f for d, _, files in os.walk(root, followlinks=True)
                          for f in files if f.endswith(".py")]
        for path in candidates:
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                found.append(shown(path))
    yield from sorted(found)


def line_count(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


def oversized(roots: Sequence[Path], cap: int = CAP) -> list[tuple[Path, int]]:
    """The modules over ``cap`` lines, with their line counts."""
    return [(p, n) for p in modules(roots) if (n := line_count(p)) > cap]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("paths", nargs="*", type=Path, default=[Path(p) for p in DEFAULT_ROOTS])
    parser.add_argument("--cap", type=int, default=CAP, help=f"most lines a module may have (default {CAP})")
    args = parser.parse_args(argv)
    missing = [p for p in args.paths if not p.exists()]
    if missing:
        # A misspelt root would otherwise check nothing and pass.
        parser.error(f"no such path: {', '.join(map(str, missing))}")
    over = oversized(args.paths, args.cap)
    for path, lines in over:
        print(f"{path}: {lines} lines, over the {args.cap}-line module cap (CONTRIBUTING.md, Rules)")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
