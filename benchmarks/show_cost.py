"""Where ``hookviz.show()`` of a large graph spends its time in the kernel: CPU, and how much of it
Python's garbage collector takes (prints medians; asserts nothing on time).

    python benchmarks/show_cost.py [--runs 6] [--nodes 20000] [--repo PATH ...]

Each run is a fresh process (as the kernel is after a restart, and as ``benchmarks/widget.py``
measures it) that builds the ``ResidualStack`` of ``benchmarks/widget.py`` and calls
``hookviz.show(model, (x,))`` once, with torch on one thread (the widget's modules imported
first, as a kernel has ipywidgets loaded). It reports the process's CPU time
over the call (``time.process_time``: a loaded host stretches wall time, much less CPU time), the
part of it spent in garbage collections (``gc.callbacks``), how many full collections ran, and how
many objects the collector tracks after the call that it did not before (a full collection scans
every one of them). With several ``--repo`` the runs alternate between the copies of hookviz in
those folders (a checkout of another commit: before and after a change, in one period).

The page's share of the first paint, and the first paint itself, are in ``benchmarks/widget.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

ONE_RUN = """\
import gc, json, time, torch, hookviz
from hookviz.examples import ResidualStack
torch.set_num_threads(1)
torch.manual_seed(0)
model, x = ResidualStack({depth}, width=4), torch.randn(4, 4)
show = hookviz.show  # imports the widget (ipywidgets): a kernel has most of that loaded already
gc.collect()
tracked = len(gc.get_objects())
spent, full, started = [0.0], [0], [0.0]
def watch(phase, info):
    if phase == "start":
        started[0] = time.process_time()
    else:
        spent[0] += time.process_time() - started[0]
        full[0] += info["generation"] == 2
gc.callbacks.append(watch)
cpu = time.process_time()
widget = show(model, (x,))
cpu = time.process_time() - cpu
gc.callbacks.remove(watch)
print(json.dumps({{"nodes": widget.summary["nodes"], "cpu": cpu, "gc": spent[0], "full": full[0],
                  "kept": len(gc.get_objects()) - tracked}}))
"""


def one_run(repo: Path, depth: int) -> dict:
    path = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    found = subprocess.run(
        [sys.executable, "-c", ONE_RUN.format(depth=depth)],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(found.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=6, help="fresh processes per copy of hookviz")
    parser.add_argument("--nodes", type=int, default=20_000, help="about how many nodes the graph has")
    parser.add_argument(
        "--repo", type=Path, action="append", help="a folder holding a copy of hookviz (default: this one)"
    )
    options = parser.parse_args()
    repos = options.repo or [REPOSITORY]
    depth = max(1, options.nodes // 9)  # a ResidualStack block makes about 9 graph nodes
    results: dict[Path, list[dict]] = {repo: [] for repo in repos}
    for _ in range(options.runs):
        for repo in repos:
            results[repo].append(one_run(repo, depth))
    for repo, runs in results.items():
        median = {key: statistics.median(run[key] for run in runs) for key in ("cpu", "gc", "full", "kept")}
        print(
            f"{repo}: {runs[0]['nodes']} nodes; hookviz.show CPU median {median['cpu']:.2f} s "
            f"(min {min(r['cpu'] for r in runs):.2f}, max {max(r['cpu'] for r in runs):.2f}), "
            f"of which garbage collection {median['gc']:.2f} s in {median['full']:g} full collections; "
            f"{median['kept'] / 1000:.0f}k more tracked objects after it; over {len(runs)} fresh processes"
        )


if __name__ == "__main__":
    main()
