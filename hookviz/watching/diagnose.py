"""A watch's own diagnosis: the findings at one kept step, from its recorded statistics.

:meth:`hookviz.Watch.diagnose` calls :func:`diagnose_step`; the layer rules and their thresholds are
those of a run's diagnosis (:mod:`hookviz.analysis.layer_findings`, :mod:`hookviz.analysis.diagnose`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from hookviz.analysis.findings import Finding, percent
from hookviz.analysis.layer_findings import layer_findings

if TYPE_CHECKING:  # for annotations only: hookviz.watching.watch imports this module
    from hookviz.watching.watch import Watch


def diagnose_step(
    watch: Watch, step: int, row: torch.Tensor, order: dict[int, int], limits: dict, group: bool
) -> list[Finding]:
    """The findings of :meth:`hookviz.Watch.diagnose` at one kept step.

    Args:
        watch: the watch that kept the step.
        step: the step's number.
        row: its statistics, float64 ``[len(watch.names), 4]`` (``norm, max_abs, nonfinite,
            zero_fraction``; NaN where a name got no gradient).
        order: ``{column: position}`` where each name's gradient first arrived in backward.
        limits: the thresholds, as returned by :func:`hookviz.analysis.diagnose.check_thresholds`.
        group: one finding per run of layers in a row with the same problem; False: one per layer.
    """
    found = []
    bad = [c for c in range(len(watch.names)) if row[c, 2].item() > 0]
    if bad:
        first = min(bad, key=lambda c: order.get(c, math.inf))
        name, kind = watch.names[first], watch.kinds[first]
        module = (
            name.rsplit(".", 1)[0]
            if kind == "parameter" and "." in name
            else ("" if kind == "parameter" else name)
        )
        what = f"parameter {name!r}" if kind == "parameter" else f"the output of module {name!r}"
        found.append(
            Finding(
                "nan",
                module,
                name,
                (
                    f"step {step}: the gradient of {what} is the first to hold NaN/Inf "
                    f"({int(row[first, 2].item())} elements; {len(bad)} names have some); record one "
                    "run of this step with hookviz.Session(...).run().diagnose() to find the op"
                ),
                row[first, 2].item(),
                step,
            )
        )
    norms = watch.layer_norms(step)
    if norms:
        zero = {}
        for module in norms:
            columns = [
                c
                for c, n in enumerate(watch.parameter_names)
                if (n.rsplit(".", 1)[0] if "." in n else "") == module
            ]
            zero[module] = min(row[c, 3].item() for c in columns)
        node_of = {
            m: next(n for n in watch.parameter_names if (n.rsplit(".", 1)[0] if "." in n else "") == m)
            for m in norms
        }
        found += layer_findings(
            norms, next(iter(norms)), limits, zero, node_of, watch.module_types, step, group
        )
    for offset, name in enumerate(watch.module_names):
        column = len(watch.parameter_names) + offset
        zeros = row[column, 3].item()
        if (
            name
            and not math.isnan(zeros)
            and zeros >= limits["dead"]
            and not _has_children(watch.module_names, name)
        ):
            found.append(
                Finding(
                    "dead",
                    name,
                    name,
                    (
                        f"step {step}: {percent(zeros)} of the gradient w.r.t. the output of module "
                        f"{name!r} ({watch.module_types.get(name)}) is exactly zero: the units after it "
                        "are dead"
                    ),
                    zeros,
                    step,
                )
            )
    return found


def _has_children(module_names: list[str], name: str) -> bool:
    return any(m.startswith(name + ".") for m in module_names)
