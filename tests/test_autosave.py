"""``hookviz.watch(model, path=...)``: the history on disk as it trains, whatever ends the job.

Training runs in a child process, killed as jobs die (``SIGKILL``, Ctrl-C's ``SIGINT``,
``sys.exit`` in a loss guard, a plain exit without closing the watch); the file it leaves is read
back with ``hookviz.load`` and compared with what the child printed of its own watch.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import hookviz

ROOT = Path(__file__).resolve().parents[1]

# A child's training loop: an MLP with SGD, a NaN loss at step NAN_STEP, each step printed.
TRAINING = """
import math, os, sys, time
import torch
import hookviz

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
NAN_STEP = int(os.environ.get("NAN_STEP", "-1"))

def train_step(step):
    optimizer.zero_grad()
    loss = model(torch.randn(32, 8)).pow(2).mean()
    if step == NAN_STEP:
        loss = loss * math.nan
    loss.backward()
    optimizer.step()
    print("step", step, flush=True)
"""


def run_child(body: str, tmp_path: Path, **env) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(TRAINING + textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **{k: str(v) for k, v in env.items()}},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(child: subprocess.Popen, line: str) -> list[str]:
    """The child's output lines up to and including ``line`` (fails if it exits first)."""
    seen = []
    for text in child.stdout:
        seen.append(text.strip())
        if text.strip() == line:
            return seen
    child.wait()
    raise AssertionError(f"the child exited ({child.returncode}) before {line!r}: {child.stderr.read()}")


def read_rest(child: subprocess.Popen, timeout: float = 120.0) -> tuple[str, str]:
    """The child's stdout after ``read_until`` and its stderr, once it exits (within ``timeout``
    seconds, else ``subprocess.TimeoutExpired``). Its stdout is read through the same buffered
    reader as ``read_until``'s: ``communicate`` reads the pipe itself and loses the lines that
    reader already took in (a child that printed ahead of the test). Each pipe is read in a thread
    of its own, so neither fills while the other is read."""
    read: dict[str, str] = {}
    readers = [
        threading.Thread(target=lambda name=name, pipe=pipe: read.update({name: pipe.read()}), daemon=True)
        for name, pipe in (("out", child.stdout), ("err", child.stderr))
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + timeout
    for reader in readers:
        reader.join(max(0.0, deadline - time.monotonic()))
    if any(reader.is_alive() for reader in readers):
        raise subprocess.TimeoutExpired(child.args, timeout)
    child.wait(timeout=max(0.0, deadline - time.monotonic()))
    return read["out"], read["err"]


def test_a_job_killed_after_its_nan_step_leaves_a_file_that_holds_that_step(tmp_path):
    # save_every_seconds is an hour: only the write at once after the NaN step can hold step 5.
    child = run_child(
        """
        w = hookviz.watch(model, optimizer=optimizer, path="train.hookviz", save_every_seconds=3600)
        step = 0
        while True:
            train_step(step)
            if w.autosave.saved_step is not None and w.autosave.saved_step >= NAN_STEP:
                print("saved", flush=True)
                NAN_STEP = 10**9
            step += 1
            time.sleep(0.01)
        """,
        tmp_path,
        NAN_STEP=5,
    )
    try:
        printed = read_until(child, "saved")
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        child.kill()
    trained = [int(line.split()[1]) for line in printed if line.startswith("step")]
    loaded = hookviz.load(tmp_path / "train.hookviz")
    assert 5 in loaded.steps and loaded.steps == list(range(len(loaded.steps)))
    assert max(loaded.steps) <= max(trained)
    at = loaded.steps.index(5)
    assert bool((loaded.local[0, at, :, 2] > 0).all())  # every parameter's gradient holds NaN there
    before = loaded.local[0, at - 1, :, 0]
    assert bool(before.isfinite().all())  # and the step before is a healthy one, norms and all
    assert not list(tmp_path.glob(".train.hookviz.*.partial"))  # no write was under way


@pytest.mark.parametrize("ending", ["SIGINT", "sys.exit"])
def test_ctrl_c_or_sys_exit_through_the_with_block_writes_every_step(tmp_path, ending):
    child = run_child(
        """
        with hookviz.watch(model, optimizer=optimizer, path="train.hookviz", save_every_seconds=3600):
            step = 0
            while True:
                train_step(step)
                if step == 12 and os.environ["ENDING"] == "sys.exit":
                    sys.exit(3)  # a loss guard
                step += 1
                time.sleep(0.01)
        """,
        tmp_path,
        ENDING=ending,
    )
    printed = []
    try:
        if ending == "SIGINT":
            printed = read_until(child, "step 12")
            child.send_signal(signal.SIGINT)
        out, err = read_rest(child)
    finally:
        child.kill()
    printed += out.split("\n")
    last = int([line for line in printed if line.startswith("step")][-1].split()[1])
    if ending == "SIGINT":
        assert "KeyboardInterrupt" in err and child.returncode != 0
    else:
        assert child.returncode == 3 and last == 12
    loaded = hookviz.load(tmp_path / "train.hookviz")
    # Every step the loop finished is in the file: written at close, as the exception left the block.
    assert loaded.steps[: last + 1] == list(range(last + 1)) and len(loaded.steps) in (last + 1, last + 2)


def test_a_watch_never_closed_is_written_when_the_interpreter_exits(tmp_path):
    child = run_child(
        """
        hookviz.watch(model, optimizer=optimizer, path="train", save_every_seconds=3600)  # not kept
        for step in range(7):
            train_step(step)
        """,
        tmp_path,
    )
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert hookviz.load(tmp_path / "train.hookviz").steps == list(range(7))


def test_a_reader_during_the_writes_always_loads_a_complete_file(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    path = tmp_path / "train.hookviz"
    done = threading.Event()
    loads: list[int] = []  # the number of steps each load found

    def read():
        while not done.is_set():
            if path.exists():
                loads.append(len(hookviz.load(path).steps))  # raises on a half-written file

    with hookviz.watch(model, optimizer=optimizer, path=path, save_every_seconds=0) as w:
        reader = threading.Thread(target=read)
        reader.start()
        try:
            # Periodic writes take at most 1 % of the time (autosave.MAX_SHARE): train until a few
            # were made, however long each takes on this machine.
            for _ in range(5000):
                optimizer.zero_grad()
                model(torch.randn(16, 32)).pow(2).mean().backward()
                optimizer.step()
                time.sleep(0.005)
                if w.autosave.writes >= 6:
                    break
        finally:
            done.set()
            reader.join()
    assert w.autosave.writes > 2 and len(set(loads)) > 2  # many writes, read between them
    assert loads == sorted(loads)  # never an older file after a newer one
    assert hookviz.load(path).steps == w.steps


def test_bad_autosave_arguments_are_refused_before_any_hook(tmp_path):
    model = torch.nn.Linear(3, 1)
    for seconds in (-1, math.nan, math.inf, "60", True):
        with pytest.raises(hookviz.WatchError, match="save_every_seconds=.* must be a number of seconds"):
            hookviz.watch(model, path=tmp_path / "w", save_every_seconds=seconds)
    with pytest.raises(hookviz.PathError, match="does not exist"):
        hookviz.watch(model, path=tmp_path / "missing" / "w.hookviz")
    assert not model.weight._backward_hooks and not model._forward_hooks
    with hookviz.watch(model, path=tmp_path / "w") as w:  # nothing kept: no file
        pass
    assert w.autosave.writes == 0 and not (tmp_path / "w.hookviz").exists()
