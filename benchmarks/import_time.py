"""What ``import hookviz`` costs above ``import torch``: the start of every kernel, command line
and job that uses hookviz (prints medians and a ratio; asserts nothing on time).

    python benchmarks/import_time.py [--runs 15] [--repo PATH ...]

Each run is a fresh process, with torch on one thread, that imports torch alone or torch and then
hookviz, alternating, and reports its CPU time (``time.process_time``: a loaded host stretches wall
time, much less CPU time) from its start to the end of the imports. The table gives the medians,
hookviz's own share (the difference) and the ratio of the two. With several ``--repo`` the runs
alternate between the copies of hookviz in those folders (a checkout of another commit: before and
after a change, in one period).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# the process's CPU time from its start: the interpreter's own start-up is in both columns alike
PROBE = """
import time, torch
{extra}
print(time.process_time())
"""
CHECK = "import hookviz; print(hookviz.__file__)"


def python(repo: Path, code: str) -> str:
    """The last line ``code`` prints, run by a fresh interpreter that finds hookviz in ``repo``."""
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    # cwd: `python -c` puts the working folder first on the path, ahead of PYTHONPATH
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip().splitlines()[-1]


def cpu_seconds(repo: Path, with_hookviz: bool) -> float:
    """One fresh process's CPU time, in seconds, to import torch (and hookviz from ``repo``)."""
    return float(python(repo, PROBE.format(extra="import hookviz" if with_hookviz else "")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per column and repository")
    parser.add_argument(
        "--repo", type=Path, action="append", help="a checkout of hookviz (default: this one)"
    )
    options = parser.parse_args()
    repos = options.repo or [REPO]
    for repo in repos:
        found = Path(python(repo, CHECK)).resolve()
        if not found.is_relative_to(repo.resolve()):
            raise SystemExit(f"{repo} is not a checkout of hookviz: its processes import {found}")
    torch_alone = {repo: [] for repo in repos}
    with_hookviz = {repo: [] for repo in repos}
    for _ in range(options.runs):
        for repo in repos:
            torch_alone[repo].append(cpu_seconds(repo, False))
            with_hookviz[repo].append(cpu_seconds(repo, True))
    print(f"import time, CPU seconds, median of {options.runs} fresh processes each (torch on one thread)")
    print("| hookviz from | import torch | import torch, hookviz | hookviz's own | ratio |")
    print("|---|---:|---:|---:|---:|")
    for repo in repos:
        alone, both = statistics.median(torch_alone[repo]), statistics.median(with_hookviz[repo])
        print(f"| {repo} | {alone:.3f} | {both:.3f} | {both - alone:.3f} | {both / alone:.3f}x |")


if __name__ == "__main__":
    main()
