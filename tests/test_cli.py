"""The ``hookviz`` command line, run as a user runs it (``python -m hookviz`` in a subprocess) on
files that real training wrote; its numbers checked against plain PyTorch's ``.grad``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from digits_runs import train
from torch import nn

import hookviz
from hookviz.examples import sigmoid_mlp

ROOT = Path(__file__).resolve().parent.parent


def hookviz_cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m hookviz *args`` with this checkout's hookviz first on the path."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "hookviz", *map(str, args)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three real runs on digits, saved: a ReLU MLP whose SGD (lr 3, momentum 0.9) overflows to
    NaN, a deep sigmoid MLP whose gradient vanishes, a shallow ReLU one that trains well."""
    folder = tmp_path_factory.mktemp("cli")
    return {
        "exploding": train(folder / "exploding.hookviz", nn.ReLU, depth=6, lr=3.0, momentum=0.9, steps=40),
        "vanishing": train(folder / "vanishing.hookviz", nn.Sigmoid, depth=8, lr=0.1, steps=20),
        "healthy": train(folder / "healthy.hookviz", nn.ReLU, depth=3, lr=0.05, steps=20),
        # the exploding run's first 18 steps: its norms pass 1e3, and no gradient holds NaN yet
        "no_nan_yet": train(folder / "no_nan_yet.hookviz", nn.ReLU, depth=6, lr=3.0, momentum=0.9, steps=18),
    }


def hookviz_cli_each(*commands: tuple, env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Several commands at once, each its own ``python -m hookviz`` process (``hookviz_cli``),
    their results in the order given: a test's commands do not wait for each other's start-up."""
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda args: hookviz_cli(*args, env=env), commands))


def report(path, *options) -> tuple[dict, subprocess.CompletedProcess]:
    return as_report(hookviz_cli("report", path, "--json", *options))


def as_report(done: subprocess.CompletedProcess) -> tuple[dict, subprocess.CompletedProcess]:
    """What ``hookviz report --json`` printed, read (it exits 0, or 1 for a ``--fail-on`` kind)."""
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), done


def test_report_names_the_onsets_plain_pytorch_saw_and_fails_on_them(runs):
    run = runs["exploding"]
    assert run.first_big is not None and run.first_nonfinite is not None  # the run does explode
    done, gate, passed, bad = hookviz_cli_each(
        ("report", run.path, "--json"),
        ("report", run.path, "--fail-on", "exploding,nan"),
        ("report", run.path, "--fail-on", "vanishing"),
        ("report", run.path, "--fail-on", "nan,bogus"),
    )
    data, done = as_report(done)
    assert done.returncode == 0 and data["kind"] == "watch" and data["steps"] == 40
    onsets = {f["kind"]: f for f in data["onsets"]}
    assert onsets["nan"]["step"] == run.first_nonfinite
    assert onsets["exploding"]["step"] == run.first_big
    # the worst step is the NaN onset; its findings and the last step's are both reported
    assert data["worst_step"] == run.first_nonfinite and data["last_step"] == 39
    assert [s["step"] for s in data["findings"]] == [39, run.first_nonfinite]
    assert all(f["step"] == s["step"] for s in data["findings"] for f in s["findings"])
    assert "nan" in {f["kind"] for f in data["findings"][1]["findings"]}
    # --fail-on: exit 1 exactly when a kind named was found
    assert "vanishing" not in data["kinds"] and {"nan", "exploding"} <= set(data["kinds"])
    assert gate.returncode == 1 and "found exploding, nan" in gate.stderr
    assert passed.returncode == 0
    assert bad.returncode == 2 and "unknown kinds bogus" in bad.stderr


def test_the_report_and_the_banner_name_the_onsets_the_watch_names(runs):
    # read back from the file, the place of an onset is the first bad name in backward order, as
    # the watch itself names it while training
    run = runs["exploding"]
    live = [(f.kind, f.step, f.node) for f in run.watch.onset()]
    assert len(live) >= 2
    data, _ = report(run.path)
    assert [(f["kind"], f["step"], f["node"]) for f in data["onsets"]] == live
    view = hookviz.Widget(None).show_watch_history(hookviz.load(run.path))
    assert [(f["kind"], f["step"], f["node"]) for f in view.diagnosis["onset"]] == live


def test_report_per_layer_norms_at_the_last_and_worst_step_are_plain_pytorchs(runs):
    run = runs["vanishing"]
    data, done = report(run.path, "--fail-on", "vanishing")
    assert done.returncode == 1 and "vanishing" in data["kinds"]
    # no NaN and nothing above exploding_norm: the worst step is the one whose layers lie furthest apart
    assert run.first_nonfinite is None and run.first_big is None
    spread = [max(n.values()) / min(n.values()) for n in run.norms]
    assert data["worst_step"] == max(range(len(spread)), key=spread.__getitem__)
    assert data["worst_step"] != data["last_step"]  # so both columns are checked below
    rows = data["layers"]["rows"]
    assert [r["layer"] for r in rows] == list(run.norms[0])  # input side first, every layer
    for column, step in (("last", data["last_step"]), ("worst", data["worst_step"])):
        for row in rows:
            assert row[column] == pytest.approx(run.norms[step][row["layer"]], rel=1e-5)
            assert row[f"{column}_nonfinite"] == 0
    # the vanishing finding names the layers nearest the input
    (finding,) = [f for f in data["findings"][0]["findings"] if f["kind"] == "vanishing"]
    assert finding["modules"][-1] == "0"


def test_the_worst_step_of_an_explosion_without_nan_is_the_largest_norm(runs):
    run = runs["no_nan_yet"]
    assert run.first_nonfinite is None and run.first_big is not None
    data, _ = report(run.path)
    assert {f["kind"] for f in data["onsets"]} >= {"exploding"} and "nan" not in data["kinds"]
    totals = [math.hypot(*norms.values()) for norms in run.norms]
    assert data["worst_step"] == max(range(len(totals)), key=totals.__getitem__)
    assert data["worst_reason"] == "the largest gradient norm of all layers together"


def test_report_prints_rich_tables_a_person_reads(runs):
    run = runs["exploding"]
    done = hookviz_cli("report", run.path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "exploding: a watch of 40 kept steps (0 … 39; one process)" in out
    assert (
        "Onsets: when each trouble started" in out and f"NaN/Inf first at step {run.first_nonfinite}" in out
    )
    assert f"Findings at step {run.first_nonfinite} (the worst: the first step with NaN/Inf" in out
    assert "step 39 (last)" in out and f"step {run.first_nonfinite} (worst)" in out
    assert "Skipped steps (the GradScaler found Inf/NaN and skipped optimizer.step()): none" in out
    assert "Traceback" not in done.stderr


def test_a_healthy_run_passes_the_gate(runs):
    data, done = report(runs["healthy"].path, "--fail-on", "any")
    assert data["kinds"] == [] and done.returncode == 0
    assert all(not s["findings"] for s in data["findings"]) and data["onsets"] == []


def test_report_lists_skipped_steps(tmp_path):
    from test_watch_view import _digits_with_optimizer

    _, w, _ = _digits_with_optimizer(steps=6, skip=3)  # bf16 autocast, a GradScaler, an Inf loss at step 3
    assert w.skipped_steps == [3]
    path = hookviz.save(w, tmp_path / "skipped")
    data, _ = report(path)
    assert data["skipped_steps"] == [3]
    assert "Inf/NaN and skipped optimizer.step()): 3" in hookviz_cli("report", path).stdout


def test_report_of_a_recorded_run_matches_diagnose(tmp_path):
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=8, width=16, inputs=8, classes=3)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    run = hookviz.Session(model, (x,), loss_fn=lambda out: F.cross_entropy(out, y)).run()
    path = hookviz.save(run, tmp_path / "run")
    data, done = report(path)
    assert data["kind"] == "run" and done.returncode == 0
    expected = hookviz.diagnose(hookviz.load(path))
    assert [f["message"] for f in data["findings"][0]["findings"]] == [f.message for f in expected]
    assert expected and data["kinds"] == sorted({f.kind for f in expected})
    # each layer's norm: plain PyTorch's, from .grad of the same forward and backward
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    rows = {r["layer"]: r["norm"] for r in data["layers"]["rows"]}
    plain = {
        name: math.hypot(*(torch.linalg.vector_norm(p.grad).item() for p in module.parameters(recurse=False)))
        for name, module in model.named_modules()
        if list(module.parameters(recurse=False))
    }
    assert rows.keys() == plain.keys()
    assert all(rows[k] == pytest.approx(v, rel=1e-5) for k, v in plain.items())


def test_a_corrupt_file_exits_2_with_the_file_format_message(tmp_path, runs):
    corrupt = tmp_path / "corrupt.hookviz"
    corrupt.write_bytes(runs["healthy"].path.read_bytes()[:-100])  # a job killed mid-write
    with pytest.raises(hookviz.FileFormatError) as error:
        hookviz.load(corrupt)
    commands = ("report", "html", "view")
    *each, missing = hookviz_cli_each(
        *[(c, corrupt) for c in commands], ("report", tmp_path / "nothing.hookviz")
    )
    for command, done in zip(commands, each, strict=True):
        assert done.returncode == 2, command
        assert done.stderr.strip() == f"hookviz: error: {error.value}"
        assert "Traceback" not in done.stderr and done.stdout == ""
    assert (
        missing.returncode == 2 and "no such file" in missing.stderr and "nothing.hookviz" in missing.stderr
    )


def test_html_writes_the_offline_page_and_prints_its_path(tmp_path, runs):
    out = tmp_path / "page.html"
    done, beside = hookviz_cli_each(
        ("html", runs["exploding"].path, "-o", out), ("html", runs["healthy"].path)
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out)
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>hookviz: exploding</title>" in page
    state = json.loads(page.split('id="hookviz-state">')[1].split("</script>")[0])
    assert state["watch_view"]["steps"] == list(range(40)) and state["watch_view"]["step"] == 39
    # default: beside the file
    assert beside.returncode == 0 and Path(beside.stdout.strip()) == runs["healthy"].path.with_suffix(".html")


def test_view_opens_the_browser_or_says_where_the_page_is(tmp_path, runs):
    seen = tmp_path / "seen.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(f"import sys; open({str(seen)!r}, 'w').write(sys.argv[1])\n")
    done = hookviz_cli("view", runs["healthy"].path, env={"BROWSER": f"{sys.executable} {browser} %s"})
    assert done.returncode == 0, done.stderr
    page = Path(done.stdout.strip())
    assert seen.read_text() == page.as_uri() and page.read_text().startswith("<!DOCTYPE html>")
    # a cluster node: no display, no browser on the PATH
    env = {"BROWSER": "", "PATH": str(tmp_path), "DISPLAY": "", "WAYLAND_DISPLAY": ""}
    done = hookviz_cli("view", runs["healthy"].path, env=env)
    page = Path(done.stdout.strip())
    assert done.returncode == 0 and page.is_file()
    assert "no browser to open it here" in done.stderr and str(page) in done.stderr


def test_the_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.scripts]\nhookviz = "hookviz.cli.main:main"' in text
    from hookviz.cli.main import main

    assert callable(main)


def test_report_and_html_of_a_gathered_watch(tmp_path, gathered_files):
    path = gathered_files / "findings.hookviz"  # 2 gloo ranks: rank 1 explodes at step 2, holds NaN at step 3
    html = tmp_path / "gathered.html"
    done, one, wrong, page = hookviz_cli_each(
        ("report", path, "--json"),
        ("report", path, "--json", "--rank", "1"),
        ("report", path, "--rank", "5"),
        ("html", path, "-o", html),
    )
    data, done = as_report(done)
    assert done.returncode == 0 and data["gathered"] and data["ranks"] == [0, 1] and data["rank"] is None
    assert {f["kind"]: f["step"] for f in data["onsets"]}["nan"] == 3 and data["worst_step"] == 3
    across = [s for s in data["findings"] if s["title"].startswith("Across ranks")][0]["findings"]
    expected = hookviz.load(path).diagnose()
    assert [(f["kind"], f["rank"], f["step"]) for f in across] == [(f.kind, f.rank, f.step) for f in expected]
    assert ("nan", 1, 3) in [(f["kind"], f["rank"], f["step"]) for f in across]
    one, _ = as_report(one)
    assert one["rank"] == 1 and one["layers"]["rows"]
    local = hookviz.load(path).history(1)
    assert one["steps"] == len(local.steps)
    assert wrong.returncode == 2 and "rank 5 is not in this history" in wrong.stderr
    assert page.returncode == 0, page.stderr
    state = html.read_text().split('id="hookviz-state">')[1].split("</script>")[0]
    assert json.loads(state)["watch_ranks"] == [0, 1]
