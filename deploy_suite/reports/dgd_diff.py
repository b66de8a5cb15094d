"""What changed between two applied DGDs, as a reviewer reads it (the experiment page's "what changed").

Both sides are :class:`deploy_suite.model.dgd.Dgd` models read from the run-scoped copies
(``applied_manifests/deploy.yaml``), so the diff sees exactly what each iteration applied,
compatibility patches included. Per component: replicas, GPUs per pod, node count, image, engine
arguments (``--flag value`` pairs of the command line the knob table reads) and environment
added/removed/changed; per knob of :data:`deploy_suite.model.knobs.KNOBS`: the values that differ, with
the workload's ``resources.pinned`` knobs marked. Environment values pass through
:func:`deploy_suite.record.ledger.redact`, so a credential written inline never reaches a report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from deploy_suite.model import knobs
from deploy_suite.model.dgd import Component, Dgd
from deploy_suite.model.podspec import env_values
from deploy_suite.record.ledger import redact

# The engine's program (``python3 -m dynamo.vllm``) is shown as one pseudo-argument.
PROGRAM = "(program)"


@dataclass(frozen=True)
class Change:
    """One difference: ``what`` (a field, ``--flag`` or ``env NAME``), before and after (None = absent)."""

    what: str
    before: str | None
    after: str | None

    @property
    def kind(self) -> str:
        return "added" if self.before is None else "removed" if self.after is None else "changed"


@dataclass(frozen=True)
class ComponentDiff:
    name: str
    status: str  # "added" | "removed" | "changed"
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class KnobChange:
    name: str
    before: knobs.KnobValue
    after: knobs.KnobValue
    pinned: bool


@dataclass(frozen=True)
class DgdDiff:
    components: tuple[ComponentDiff, ...]
    knobs: tuple[KnobChange, ...]
    pinned_unchanged: tuple[str, ...] = field(default=())
    renamed: tuple[str, str] | None = None

    @property
    def empty(self) -> bool:
        return not self.components and not self.knobs and self.renamed is None


def flag_pairs(tokens: Sequence[str]) -> dict[str, str | None]:
    """A command line's ``--flag value`` / ``--flag=value`` / bare ``--flag`` as a mapping (argparse:
    the last occurrence wins); the words before the first ``--flag`` are the program
    (``python3 -m dynamo.vllm``). A value may look like ``-1``: only ``--`` starts a flag."""
    out: dict[str, str | None] = {}
    program: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and len(tok) > 2:
            if "=" in tok:
                name, value = tok.split("=", 1)
                out[name] = value
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                out[tok] = tokens[i + 1]
                i += 1
            else:
                out[tok] = None
        elif not out:
            program.append(tok)
        i += 1
    return {PROGRAM: " ".join(program), **out} if program else out


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _mapping_changes(prefix: str, before: dict[str, str | None], after: dict[str, str | None],
                     bare: str = "(set)") -> list[Change]:
    out = []
    for key in [*before, *(k for k in after if k not in before)]:
        if key in before and key in after and before[key] == after[key]:
            continue
        old = (before[key] if before[key] is not None else bare) if key in before else None
        new = (after[key] if after[key] is not None else bare) if key in after else None
        out.append(Change(f"{prefix}{key}", old, new))
    return out


def _shown(name: str, value: str | None) -> str | None:
    """A value as a report may show it: redact() works on NAME=value text, so a credential-named
    key (``HF_TOKEN``, ``--api-key``) or a token-shaped value is hidden."""
    return None if value is None else redact(f"{name}={value}").split("=", 1)[1]


def _env(c: Component) -> dict[str, str | None]:
    values = env_values(c.env)
    return {var.name: _shown(var.name, values[var.name]) if var.name in values else "(from a reference)"
            for var in c.env}


def _args(c: Component) -> dict[str, str | None]:
    return {flag: _shown(flag, value) for flag, value in flag_pairs(c.tokens).items()}


def component_changes(before: Component, after: Component) -> list[Change]:
    fields = (("replicas", before.replicas, after.replicas), ("GPUs per pod", before.gpus_per_pod, after.gpus_per_pod),
              ("node count", before.node_count, after.node_count), ("image", before.image, after.image))
    out = [Change(name, _text(a), _text(b)) for name, a, b in fields if a != b]
    out.extend(_mapping_changes("", _args(before), _args(after)))
    out.extend(_mapping_changes("env ", _env(before), _env(after)))
    return out


def _whole(c: Component) -> list[Change]:
    """Every field of a component that exists on one side only (listed as added)."""
    empty: dict[str, str | None] = {}
    fields = [Change("replicas", None, str(c.replicas)), Change("GPUs per pod", None, str(c.gpus_per_pod)),
              Change("node count", None, str(c.node_count)), Change("image", None, _text(c.image))]
    return [*fields, *_mapping_changes("", empty, _args(c)), *_mapping_changes("env ", empty, _env(c))]


def _flip(changes: Iterable[Change]) -> tuple[Change, ...]:
    return tuple(Change(c.what, c.after, c.before) for c in changes)


def diff(before: Dgd, after: Dgd, pinned: Iterable[str] = ()) -> DgdDiff:
    """The reviewer's diff from ``before`` (the previous iteration's applied DGD) to ``after``."""
    pinned_set = {p for p in pinned if p in knobs.KNOBS}
    old = {c.name: c for c in before.components}
    new = {c.name: c for c in after.components}
    comps: list[ComponentDiff] = []
    for name in [*old, *(n for n in new if n not in old)]:
        if name not in new:
            comps.append(ComponentDiff(name, "removed", _flip(_whole(old[name]))))
        elif name not in old:
            comps.append(ComponentDiff(name, "added", tuple(_whole(new[name]))))
        else:
            changes = component_changes(old[name], new[name])
            if changes:
                comps.append(ComponentDiff(name, "changed", tuple(changes)))
    moved = knobs.changed_knobs(before, after, knobs.KNOBS)
    changed = tuple(KnobChange(n, *moved[n], n in pinned_set) for n in moved)
    unchanged = tuple(sorted(pinned_set - moved.keys()))
    renamed = (before.name, after.name) if before.name != after.name else None
    return DgdDiff(tuple(comps), changed, unchanged, renamed)
