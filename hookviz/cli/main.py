"""The ``hookviz`` command (also ``python -m hookviz``): read saved runs and watches without Jupyter.

- ``hookviz report FILE``: what the widget's banner says, in the terminal (``--json`` for scripts);
  ``--fail-on nan,exploding`` exits 1 when a finding of those kinds is found, so a CI job can gate a
  training smoke test.
- ``hookviz html FILE [-o OUT]``: the offline page (:func:`hookviz.widget.export.save_html`).
- ``hookviz view FILE``: the offline page in a temporary file, opened in the browser.
- ``hookviz compare A B``: two watches side by side (:func:`hookviz.compare`).

Exit codes: 0; 1 when ``--fail-on`` names a kind that was found; 2 for a file that cannot be read
(the :class:`hookviz.FileFormatError` message, no traceback) or a bad option.
"""

from __future__ import annotations

import json
import sys
import tempfile
import webbrowser
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from hookviz import text
from hookviz.analysis.compare import DEFAULT_FACTOR, ratio
from hookviz.cli.report import FAIL_KINDS, report
from hookviz.errors import HookvizError
from hookviz.widget.sources import open_source

app = typer.Typer(
    name="hookviz",
    help="Read hookviz files (hookviz.save of a run or a watch) in a terminal: report, html, view, compare.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Exit codes (the module docstring).
FOUND = 1
BAD_INPUT = 2

_FILE = Annotated[Path, typer.Argument(help="a .hookviz file (hookviz.save of a run or a watch)")]
_RANK = Annotated[
    Optional[int],  # noqa: UP045 (typer reads the annotation at run time, also on Python 3.10)
    typer.Option(help="a gathered watch: read this rank's local gradients (default: the reduced ones)"),
]


def _fail(error: BaseException) -> typer.Exit:
    """The error's message on stderr, no traceback; exit code 2."""
    if isinstance(error, HookvizError):
        message = str(error)
    elif isinstance(error, FileNotFoundError):
        message = f"no such file: {error.filename}; give the path of a file hookviz.save wrote"
    else:
        message = f"{type(error).__name__}: {error}"
    print(f"hookviz: error: {message}", file=sys.stderr)  # whole, unwrapped: scripts read it
    return typer.Exit(BAD_INPUT)


def _kinds(fail_on: str | None) -> set[str]:
    """The kinds ``--fail-on`` names ("nan,exploding"; "any": every kind)."""
    if not fail_on:
        return set()
    kinds = {k.strip() for k in fail_on.split(",") if k.strip()}
    if "any" in kinds:
        return set(FAIL_KINDS)
    unknown = sorted(kinds - set(FAIL_KINDS))
    if unknown:
        raise HookvizError(
            f"--fail-on names unknown kinds {', '.join(unknown)}; choose from {', '.join(FAIL_KINDS)}, or any"
        )
    return kinds


@app.command("report")
def report_command(
    file: _FILE,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    fail_on: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="exit 1 when a finding of these kinds is found, e.g. nan,exploding (or any)"),
    ] = None,
    rank: _RANK = None,
) -> None:
    """Print the findings, the onsets and the per-layer gradient norms of a saved run or watch."""
    try:
        kinds = _kinds(fail_on)
        data = report(open_source(file, rank))
    except (HookvizError, OSError) as error:
        raise _fail(error) from None
    if as_json:
        print(json.dumps(data, indent=2, allow_nan=False))
    else:
        print_report(data, Console(highlight=False))
    failed = sorted(kinds & set(data["kinds"]))
    if failed:
        print(f"hookviz: found {', '.join(failed)} (--fail-on {fail_on})", file=sys.stderr)
        raise typer.Exit(FOUND)


def print_report(data: dict, console: Console) -> None:
    """:func:`hookviz.cli.report.report`'s dict as rich tables on ``console``."""
    console.print(f"[bold]{escape(data['label'])}[/bold]: {escape(_what(data))}")
    if data["kind"] == "watch" and not data["steps"]:
        console.print("The watch kept no step (no backward reached the model while it was open).")
        return
    for note in data.get("notes", []):
        console.print(note, style="dim", markup=False)
    if data["onsets"]:
        table = _findings_table("Onsets: when each trouble started, and where", data["onsets"])
        console.print(table)
    for section in data["findings"]:
        if section["findings"]:
            console.print(_findings_table(section["title"], section["findings"]))
        else:
            console.print(f"{section['title']}: none")
    console.print(_layers_table(data))
    if data["kind"] == "watch":
        skipped = data["skipped_steps"]
        console.print(
            f"Skipped steps (the GradScaler found Inf/NaN and skipped optimizer.step()): "
            f"{', '.join(map(str, skipped)) if skipped else 'none'}"
        )


def _what(data: dict) -> str:
    if data["kind"] == "run":
        return "a recorded run (one forward and backward)"
    if not data["steps"]:
        return "a watch with no kept step"
    whose = "one process"
    if data["gathered"]:
        whose = f"{len(data['ranks'])} ranks, " + (
            "reduced gradients (.grad after the all-reduce)"
            if data["rank"] is None
            else f"rank {data['rank']}'s local gradients"
        )
    return f"a watch of {data['steps']} kept steps ({data['first_step']} … {data['last_step']}; {whose})"


def _findings_table(title: str, findings: list[dict]) -> Table:
    table = Table(title=escape(title), title_justify="left", show_lines=True)
    for name, options in (
        ("kind", {"style": "bold"}),
        ("step", {"justify": "right"}),
        ("layer", {}),
        ("value", {"justify": "right"}),
        ("what", {"ratio": 1}),
    ):
        table.add_column(name, **options)
    for f in findings:
        modules = f["modules"]
        where = f"{modules[0]} … {modules[-1]}" if len(modules) > 1 else text.module_name(f["module"])
        cells = (
            f["kind"],
            "" if f["step"] is None else str(f["step"]),
            where,
            text.number(f["value"]),
            f["message"],
        )
        table.add_row(*map(Text, cells))  # Text: a message's brackets are not rich markup
    return table


def _layers_table(data: dict) -> Table:
    layers = data["layers"]
    table = Table(title="Gradient norm per layer (input side first)", title_justify="left")
    table.add_column("layer")
    for column in layers["columns"]:
        table.add_column(column, justify="right")
    keys = [k for k in ("last", "worst", "norm", "ratio") if any(k in row for row in layers["rows"])]
    values = {k: text.column([row.get(k) for row in layers["rows"]]) for k in keys}
    for i, row in enumerate(layers["rows"]):
        cells = []
        for k in keys:
            cell = values[k][i]
            if row.get(f"{k}_nonfinite"):
                cell = f"NaN/Inf ({text.number(row[f'{k}_nonfinite'])})"
            cells.append(cell)
        table.add_row(*map(Text, (text.module_name(row["layer"]), *cells)))
    return table


@app.command("html")
def html_command(
    file: _FILE,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="the page to write (default: FILE with .html)"),
    ] = None,
    rank: _RANK = None,
) -> None:
    """Write the offline page of a saved run or watch (opens in a browser, no kernel, no network)."""
    try:
        target = write_page(file, out if out is not None else file.with_suffix(".html"), rank)
    except (HookvizError, OSError) as error:
        raise _fail(error) from None
    print(target)


@app.command("view")
def view_command(file: _FILE, rank: _RANK = None) -> None:
    """Write the offline page to a temporary file and open it in the browser."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="hookviz-"))
        target = write_page(file, folder / file.with_suffix(".html").name, rank)
    except (HookvizError, OSError) as error:
        raise _fail(error) from None
    print(target)
    try:
        opened = webbrowser.open(target.resolve().as_uri())
    except webbrowser.Error:
        opened = False
    if not opened:
        print(
            "no browser to open it here: copy the file to a machine with one "
            f"(scp HOST:{target.resolve()} .) and open it there",
            file=sys.stderr,
        )


def write_page(file: Path, out: Path, rank: int | None = None) -> Path:
    """The offline page of ``file`` written to ``out`` (:func:`hookviz.widget.export.save_html`):
    a run's graph; a watch's view over the run saved with it, or alone (heatmap, findings).

    Raises:
        FileFormatError, FileNotFoundError, PathError: as :func:`hookviz.load`; PathError for ``out``.
        WatchError: ``rank`` is not a rank of the history, or the watch kept no step.
    """
    from hookviz.widget.export import save_html
    from hookviz.widget.recorded import RecordedSession
    from hookviz.widget.widget import Widget

    source = open_source(file, rank)
    if source.watch is None:
        widget = Widget(RecordedSession(source.run))
    else:
        widget = Widget(RecordedSession(source.run) if source.run is not None else None)
        widget.show_watch_history(source.watch.source, rank=source.rank)
    try:
        return save_html(widget, out, title=f"hookviz: {source.label}")
    finally:
        widget.close()


@app.command("compare")
def compare_command(
    a: Annotated[Path, typer.Argument(help="the first watch's .hookviz file")],
    b: Annotated[Path, typer.Argument(help="the second watch's .hookviz file")],
    factor: Annotated[
        float, typer.Option(help="the ratio of norms above which the runs part")
    ] = DEFAULT_FACTOR,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="also write the comparison's offline page (plotly) here"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the comparison as JSON")] = False,
    rank: _RANK = None,
) -> None:
    """Two watches side by side: where their gradient norms part, per layer, and each one's findings."""
    from hookviz.widget.compare import compare

    try:
        comparison = compare(a, b, factor=factor, rank=rank)
        target = comparison.save_html(out) if out is not None else None
    except (HookvizError, OSError) as error:
        raise _fail(error) from None
    if as_json:
        print(json.dumps({**comparison.to_dict(), "page": str(target) if target else None}, indent=2))
        return
    console = Console(highlight=False)
    print_comparison(comparison, console)
    if target is not None:
        console.print(f"page: {target}", markup=False)


def print_comparison(comparison, console: Console) -> None:
    """A :class:`hookviz.widget.compare.Comparison` as rich tables on ``console``."""
    console.print(comparison.summary(), markup=False)
    data = comparison.to_dict()
    first = comparison.first
    name_a, name_b = comparison.names
    table = Table(
        title=f"Gradient norm per layer at step {first.step}, where they first part"
        if first
        else "Gradient norm per layer at the last step both kept",
        title_justify="left",
    )
    for column in ("layer", name_a, name_b, "apart", "first parts at step"):
        table.add_column(escape(column), justify="left" if column == "layer" else "right")
    step = first.step if first else (comparison.steps[-1] if comparison.steps else None)
    if step is not None:
        at_a, at_b = comparison.norms[0].at(step), comparison.norms[1].at(step)
        parted = {p.layer: p for p in comparison.partings}
        for layer in comparison.layers:
            a, b = at_a.get(layer), at_b.get(layer)
            p = parted.get(layer)
            cells = (
                text.module_name(layer),
                text.norm(a),
                text.norm(b),
                _ratio(a, b),
                str(p.step) if p else "–",
            )
            table.add_row(*map(Text, cells))
        console.print(table)
    for run in data["runs"]:
        console.print(f"[bold]{escape(run['name'])}[/bold]: {run['steps']} kept steps")
        if run["onsets"]:
            console.print(_findings_table(f"{run['name']}: onsets", run["onsets"]))
        if run["findings"]:
            console.print(
                _findings_table(f"{run['name']}: findings at step {run['last_step']}", run["findings"])
            )
        if not run["onsets"] and not run["findings"]:
            console.print("  no findings")
    only_a, only_b = comparison.only
    if only_a or only_b:
        console.print(
            f"layers in one run only: {name_a}: {only_a or 'none'}; {name_b}: {only_b or 'none'}",
            markup=False,
        )


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "–"
    apart = ratio(a, b)
    return "–" if apart is None else ("inf" if apart == float("inf") else f"{text.number(apart)}×")


def main() -> None:
    """The console script's entry point (``hookviz``, ``python -m hookviz``)."""
    app()
