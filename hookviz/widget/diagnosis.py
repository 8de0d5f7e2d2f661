"""The diagnosis banner: findings as JSON, and the diagnosis of the run on screen."""

from __future__ import annotations

from hookviz.analysis.diagnose import diagnose
from hookviz.analysis.findings import places
from hookviz.widget.failures import reported
from hookviz.widget.payload import json_float

FINDING_KINDS = ("nan", "exploding", "vanishing", "dead", "saturated", "update_too_large", "update_too_small")


def findings_json(findings, caused_by_edits: set | None = None) -> list[dict]:
    """:class:`hookviz.Finding` objects as ``[{kind, module, node, message, value, step, modules,
    from_edit}]`` (``modules``: the run of layers a grouped finding covers, else empty);
    ``from_edit`` for those with a place (``(kind, module)``, each module of a grouped finding)
    in ``caused_by_edits``."""
    caused_by_edits = caused_by_edits or set()
    return [
        {
            "kind": f.kind,
            "module": f.module,
            "node": f.node,
            "message": f.message,
            "value": json_float(f.value),
            "step": f.step,
            "modules": list(f.modules),
            "from_edit": any((f.kind, module) in caused_by_edits for module in (f.modules or (f.module,))),
        }
        for f in findings
    ]


def diagnosis_json(
    findings,
    source: str = "run",
    step: int | None = None,
    error: str | None = None,
    caused_by_edits: set | None = None,
    pending: bool = False,
) -> dict:
    """What the diagnosis banner shows: ``{source, step, findings, counts, error, pending}``.

    ``source`` is ``"run"`` (``hookviz.diagnose(run)``) or ``"watch"`` (``watch.diagnose(step)``);
    ``counts`` is ``{kind: number of findings}`` in :data:`FINDING_KINDS` order (kinds with none
    left out); ``error`` says why the diagnosis failed (then ``findings`` is empty); ``pending``:
    the run's details are still being recorded (:meth:`hookviz.Widget.fill_details`).
    """
    items = findings_json(findings, caused_by_edits)
    kinds = [k for k in FINDING_KINDS if any(f["kind"] == k for f in items)]
    kinds += sorted({f["kind"] for f in items} - set(kinds))
    return {
        "source": source,
        "step": step,
        "findings": items,
        "counts": {k: sum(f["kind"] == k for f in items) for k in kinds},
        "error": error,
        "pending": pending,
    }


def diagnose_run(widget, run) -> dict:
    """``hookviz.diagnose(run)`` as the banner's JSON, with the chart's vanishing rule; a finding the
    baseline run does not have, in a run with edits, is marked as caused by the edits. A
    failure is shown in the banner, never raised."""
    try:
        findings = diagnose(run, vanishing=widget.vanishing_threshold)
        caused = set()
        if run.edits and widget.baseline is not None and widget.baseline is not run:
            before = diagnose(widget.baseline, vanishing=widget.vanishing_threshold)
            caused = places(findings) - places(before)
        return diagnosis_json(findings, "run", caused_by_edits=caused)
    except Exception as error:  # a diagnosis bug must not take the widget down: logged, shown in the banner
        return diagnosis_json([], "run", error=reported("diagnosis", error))
