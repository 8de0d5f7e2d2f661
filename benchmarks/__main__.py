"""hookviz's whole benchmark table in one command, written with the machine it ran on to a results file.

    python -m benchmarks [--repeats N] [--device cpu] [--only mlp|gpt|none] [--rows TEXT]
                         [--widget] [--gather] [--output PATH | --no-write]

For each case of ``benchmarks/cases.py`` (the 20-layer MLP and GPT-2 6x384) and each row of
``benchmarks/rows.py`` (hookviz's fresh run, backward-only re-run and watch; wandb, torchlens and
torchviz; the floors), the ratio is the median over interleaved pairs of the row's time over a
plain step's (``zero_grad``, forward, loss, ``backward``), in this one process (``timing.py``).
Then the peak memory of a fresh run over a plain step's: on CPU each in a fresh process (this
module with ``--peak``), its peak resident set above the one before the step, with glibc's mmap
threshold fixed at 64 KiB (``MALLOC_MMAP_THRESHOLD_``) so that freed tensors leave the resident set;
on CUDA ``torch.cuda.max_memory_allocated``.

``--widget`` appends ``benchmarks/widget.py`` (JupyterLab + headless Chromium: ``show()`` to first
paint and more) and ``--gather`` appends ``benchmarks/gather.py`` (DDP on 2 processes), each run as
its own process. The table goes to stdout and to ``benchmarks/results/<date>-<commit>.md``; what
the rows mean and what was learnt from them is in ``docs/perf.md``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from benchmarks import rows as row_definitions
from benchmarks.cases import CASES, Case
from benchmarks.timing import blocks, paired

REPOSITORY = Path(__file__).resolve().parents[1]
RESULTS = REPOSITORY / "benchmarks" / "results"
PEERS = ("transformers", "wandb", "torchlens", "torchviz")


def _git(*arguments: str) -> str:
    found = subprocess.run(["git", *arguments], cwd=REPOSITORY, capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _load() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def header(options: argparse.Namespace, command: str) -> list[str]:
    """The results file's first lines: when, what code, which machine, how measured."""
    commit = _git("rev-parse", "--short", "HEAD")
    changed = _git("status", "--porcelain", "--untracked-files=no")
    now = datetime.datetime.now(datetime.timezone.utc)
    device = options.device
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(torch.device(device))})"
    return [
        f"# hookviz benchmarks, {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"- command: `{command}`",
        f"- hookviz commit: {commit} ({_git('log', '-1', '--format=%cI', 'HEAD')})"
        + (", with uncommitted changes" if changed else ""),
        f"- machine: {_cpu_model()}, {os.cpu_count()} logical cores, "
        f"torch threads {torch.get_num_threads()}; load average (1, 5, 15 min) at start {_load()}",
        f"- device: {device}",
        f"- Python {platform.python_version()}, torch {torch.__version__}, "
        + ", ".join(f"{name} {_version(name)}" for name in PEERS),
        "- ratio: median over interleaved (row, baseline) pairs of row time / baseline time, in one "
        "process; quartiles of the pair ratios beside it. Baseline *step*: `zero_grad`, forward, loss, "
        "`backward()`; *optimizer*: the same on a copy, plus `opt.step()`; *backward*: `torch.autograd.grad` "
        "on a retained graph.",
        "- what each row measures, and what earlier measurements taught: docs/perf.md",
    ]


def _peak_bytes(case_key: str, variant: str, device: str) -> int:
    """Peak memory of one step of ``variant`` ("plain" or "hookviz") above what was in use before."""
    if device.startswith("cuda"):
        return _peak_here(case_key, variant, device)
    environment = {
        **os.environ,
        "MALLOC_MMAP_THRESHOLD_": "65536",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    found = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--peak", case_key, variant],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(found.stdout.split()[-1])


def _peak_here(case_key: str, variant: str, device: str = "cpu") -> int:
    import hookviz

    case = CASES[case_key](device)
    session = hookviz.Session(case.model, case.args, loss_fn=case.loss_fn)
    step = case.plain_step if variant == "plain" else (lambda: session.run(forward=True))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    before = _status("VmRSS")
    step()
    return _status("VmHWM") - before


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(case: Case, repeats: int, device: str, emit, only_rows: list[str] | None = None) -> None:
    """Time every row on ``case`` and ``emit`` its table lines as they come."""
    emit("")
    emit(f"## {case.title}, {repeats} pairs a row")
    emit("")
    emit("| row | ratio | quartiles | row ms | baseline | baseline ms | target |")
    emit("|---|---:|---:|---:|---|---:|---:|")
    watched, close_watched = row_definitions.watched_step(case)
    baselines = {
        "step": case.plain_step,
        "optimizer": row_definitions.optimizer_step(case),
        "backward": row_definitions.retained_backward(case),
        "watched": watched,
        "floor": row_definitions.floor_step(case),
    }
    try:
        _rows(case, baselines, repeats, device, emit, only_rows)
    finally:
        close_watched()
    if only_rows:  # a chosen few rows: no memory line
        return
    plain = statistics.median(_peak_bytes(case.key, "plain", device) for _ in range(3))
    recorded = statistics.median(_peak_bytes(case.key, "hookviz", device) for _ in range(3))
    emit(
        f"| peak memory, fresh run over plain step (median of 3) | {recorded / plain:.2f}x | | "
        f"{recorded / 2**20:.1f} MiB | step | {plain / 2**20:.1f} MiB | |"
    )


def _rows(case: Case, baselines: dict, repeats: int, device: str, emit, only_rows: list[str] | None) -> None:
    """One line per row of ``benchmarks/rows.py`` on ``case`` (those whose label holds one of
    ``only_rows``, when given)."""
    for row in row_definitions.rows():
        if only_rows and not any(part in row.label for part in only_rows):
            continue
        try:
            step, close = row.setup(case)
        except row_definitions.Skip as reason:
            emit(f"| {row.label} | skipped: {reason} | | | | | |")
            continue
        baseline = baselines[row.baseline]
        try:
            if row.block_seconds:
                step, baseline = blocks(step, baseline, row.block_seconds, device)
            pairs = paired(step, baseline, repeats, device, clock=row.clock)
        finally:
            close()
        first, third = pairs.quartiles
        target = row.targets.get(case.key)
        verdict = "" if target is None else f"≤ {target:g}x " + ("met" if pairs.ratio <= target else "MISSED")
        emit(
            f"| {row.label} | {pairs.ratio:.3f}x | {first:.2f}-{third:.2f} | "
            f"{statistics.median(pairs.row) * 1e3:.1f} | {row.baseline} | "
            f"{statistics.median(pairs.baseline) * 1e3:.1f} | {verdict} |"
        )


def _script_section(title: str, script: str, arguments: list[str], emit) -> None:
    """Run ``benchmarks/<script>`` as its own process and emit what it prints, as a section."""
    emit("")
    emit(f"## {title}: `{' '.join(['python', f'benchmarks/{script}', *arguments])}`")
    emit("")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
    }
    found = subprocess.run(
        [sys.executable, str(REPOSITORY / "benchmarks" / script), *arguments],
        cwd=REPOSITORY,
        env=environment,
        capture_output=True,
        text=True,
    )
    emit("```")
    for line in (found.stdout + (found.stderr if found.returncode else "")).splitlines():
        emit(line)
    emit("```")
    if found.returncode:
        emit(f"(exited with status {found.returncode})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, help="pairs a row (default: the case's own, 15 MLP, 9 GPT-2)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--only", choices=[*sorted(CASES), "none"], help="one case; none: only --widget / --gather"
    )
    parser.add_argument(
        "--rows", action="append", metavar="TEXT", help="only the rows whose label holds TEXT (repeatable)"
    )
    parser.add_argument("--widget", action="store_true", help="append benchmarks/widget.py (a browser)")
    parser.add_argument("--gather", action="store_true", help="append benchmarks/gather.py (2 processes)")
    parser.add_argument(
        "--output", type=Path, help="results file (default: benchmarks/results/<date>-<commit>.md)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--peak", nargs=2, metavar=("CASE", "VARIANT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.peak:  # the child process of _peak_bytes
        print(_peak_here(*options.peak))
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    command = "python -m benchmarks " + " ".join(sys.argv[1:])
    path = None
    if not options.no_write:
        today = datetime.datetime.now(datetime.timezone.utc)
        path = options.output or RESULTS / f"{today:%Y-%m-%d}-{_git('rev-parse', '--short', 'HEAD')}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def emit(line: str) -> None:
        """Print a line and append it to the results file at once: a run cut short keeps its rows."""
        print(line, flush=True)
        if path is not None:
            with path.open("a") as results:
                results.write(line + "\n")

    for line in header(options, command.strip()):
        emit(line)
    try:
        for key, build in CASES.items():
            if options.only in (None, key):
                case = build(options.device)
                measure(case, options.repeats or case.repeats, options.device, emit, options.rows)
        if options.widget:
            _script_section("Widget in JupyterLab + headless Chromium", "widget.py", [], emit)
        if options.gather:
            _script_section("Watch.gather across 2 DDP processes", "gather.py", [], emit)
    except KeyboardInterrupt:
        emit("")
        emit("(interrupted: the rows above are all this run measured)")
        raise
    finally:
        emit("")
        emit(f"load average (1, 5, 15 min) at the end: {_load()}")
        if path is not None:
            shown = path.relative_to(REPOSITORY) if path.is_relative_to(REPOSITORY) else path
            print(f"\nwritten to {shown}")


if __name__ == "__main__":
    main()
