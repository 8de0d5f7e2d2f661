"""Findings: the :class:`Finding` record, how a finding names places and numbers, and grouping.

Findings about neighbouring places are grouped (``group=True``, the default): a run of layers in
a row (in the order nearest the loss first) that all vanish, explode or have dead updates is one
finding that names the first and last layer and the range of its numbers ("the gradient vanishes
from module '30' down to module '0' (16 Linear layers in a row): 1e-4 … 4e-17 x ..."); so are
saturated activations and dead units of modules that follow each other in forward order. A
grouped finding lists its places in ``modules`` and points at the worst of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from hookviz.data.run import LOSS_MODULE
from hookviz.text import percent as percent  # the one home of percentages; findings name it here


@dataclass
class Finding:
    """One problem found in a run (or in one step of a :class:`hookviz.Watch`).

    Attributes:
        kind: ``"vanishing"``, ``"exploding"``, ``"dead"``, ``"saturated"`` or ``"nan"``; a watch's
            step also ``"update_too_large"`` or ``"update_too_small"`` (its update-to-weight ratio).
        module: qualified name of the module concerned ("" = the root module, ``"(loss)"`` = made
            by ``loss_fn``).
        node: the graph node id to look at (a parameter's name, or an op node id), or None.
        message: what is wrong, in plain words, with the numbers.
        value: the number behind the finding: a ratio (vanishing), a norm (exploding), a
            fraction (dead, saturated), a count of NaN/Inf elements (nan) or an update-to-weight
            ratio (update_too_large, update_too_small).
        step: the training step, for findings of a watch; None for a run.
        rank: the distributed rank concerned, for cross-rank findings of a gathered watch
            (:meth:`hookviz.watching.gather.RankHistory.diagnose`); else None.
        modules: for a grouped finding, the modules of the run of layers (or of modules) it
            covers, in the order the message names them; ``module``, ``node`` and ``value`` are
            those of the worst of them. Empty for a finding about one place.
    """

    kind: str
    module: str
    node: str | None
    message: str
    value: float | None = None
    step: int | None = None
    rank: int | None = None
    modules: tuple[str, ...] = ()


def places(findings: list[Finding]) -> set[tuple[str, str]]:
    """``(kind, module)`` of every place ``findings`` cover, each module of a grouped one included:
    what two runs' findings are compared by (a grouped finding's ``module`` is only its worst)."""
    return {(f.kind, module) for f in findings for module in (f.modules or (f.module,))}


# Which finding of a run is its worst: the smallest ratio, the largest norm or fraction.
_WORST = {"vanishing": min, "update_too_small": min}


def _runs(flags: list[Finding | None]) -> list[list[Finding]]:
    """Maximal runs of consecutive findings of one kind; None (a healthy place) ends a run."""
    runs: list[list[Finding]] = []
    previous = None
    for finding in flags:
        if finding is not None:
            if previous is not None and previous.kind == finding.kind:
                runs[-1].append(finding)
            else:
                runs.append([finding])
        previous = finding
    return runs


def grouped(flags: list[Finding | None], describe, group: bool = True) -> list[Finding]:
    """The findings of ``flags`` (one entry per place, in order; None = healthy), each run of two
    or more of one kind merged into one finding whose message is ``describe(run)``."""
    if not group:
        return [f for f in flags if f is not None]
    out = []
    for run in _runs(flags):
        if len(run) == 1:
            out.append(run[0])
            continue
        worst = _WORST.get(run[0].kind, max)(run, key=lambda f: f.value)
        out.append(
            Finding(
                worst.kind,
                worst.module,
                worst.node,
                describe(run),
                worst.value,
                worst.step,
                worst.rank,
                tuple(f.module for f in run),
            )
        )
    return out


def run_span(
    run: list[Finding], types: dict[str, str] | None, what: str = "layers", between: str = "down to"
) -> str:
    """ "module '30' down to module '0' (16 Linear layers in a row)" for a run of findings."""
    kinds = {(types or {}).get(f.module) for f in run}
    same = kinds.pop() if len(kinds) == 1 else None
    first, last = (
        (module_label(run[0].module), module_label(run[-1].module))
        if same
        else (
            module_label(run[0].module, types),
            module_label(run[-1].module, types),
        )
    )
    return f"{first} {between} {last} ({len(run)} {same + ' ' if same else ''}{what} in a row)"


def module_label(module: str, types: dict[str, str] | None = None) -> str:
    if module == LOSS_MODULE:
        return "the loss function"
    name = "the root module" if module == "" else f"module {module!r}"
    kind = (types or {}).get(module)
    return f"{name} ({kind})" if kind else name
