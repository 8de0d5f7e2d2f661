"""Shared fixtures: the canonical example, a snapshot of everything a run must leave untouched, and
the browser tests' one JupyterLab.

The browser tests (tests/e2e/) share one ``jupyter lab`` per test session (under pytest-xdist, per
worker: a worker is a session of its own), started by the first test that asks for ``lab_folder``
and stopped at the session's end (``harness.SharedLab``), and one headless Chromium, started by the
first page a test opens (``harness.chromium_page``, a fresh browser context per page). Each such
test gets its own folder under the server's root (a ``harness.Lab``) and writes its notebooks
there. When a test that used it fails, its report gets the server's log of that test (kernel
starts, the tracebacks the server saw) beside the browser console ``harness.diagnostics`` adds.
(Here and not in tests/e2e/conftest.py: test files import this one as ``conftest``.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hookviz
from hookviz.examples import Canonical, canonical_inputs

E2E = Path(__file__).parent / "e2e"
_LOG_START = pytest.StashKey[int]()
_SERVER = pytest.StashKey[object]()


def _harness():
    """tests/e2e/harness.py, imported only by the tests that start a browser or a server."""
    if str(E2E) not in sys.path:
        sys.path.insert(0, str(E2E))
    import harness

    return harness


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory):
    """The session's ``jupyter lab`` (skips without a browser; fails in CI, see ``require_browser``)."""
    harness = _harness()
    harness.require_browser()
    with harness.SharedLab(tmp_path_factory.mktemp("jupyter")).running() as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def _one_browser():
    """The browser tests' one Chromium (``harness.chromium_page``: a fresh context per page),
    stopped at the session's end; never started by a session without a browser test."""
    yield
    if "harness" in sys.modules:
        sys.modules["harness"].close_browser()


def pytest_configure(config):
    # Under pytest-xdist (`-n auto`, README) the workers share the cores: torch's OpenMP pool, one
    # thread per core in every worker and in every kernel and subprocess a worker starts,
    # oversubscribes them, and libgomp's idle threads spin while they wait, so a test that trains
    # crawls beside another worker's. One thread per worker (and, through the environment, per
    # kernel and subprocess it starts); a run without -n keeps torch's default.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def pytest_runtest_setup(item):
    # While Playwright's sync API lives, its event loop counts as running in this thread
    # (asyncio.get_running_loop() returns it): a test outside tests/e2e/ would run as if in a
    # kernel (hookviz's IPython hooks wait on that loop). The browser tests come first and
    # together, so the shared Chromium stops once, at the first test after them.
    if "harness" in sys.modules and E2E not in Path(item.path).parents:
        sys.modules["harness"].close_browser()


@pytest.fixture
def lab_folder(shared_lab, request):
    """This test's folder in the shared JupyterLab; its kernels are shut down when the test ends."""
    request.node.stash[_SERVER] = shared_lab
    request.node.stash[_LOG_START] = shared_lab.log.stat().st_size
    with shared_lab.folder(request.node.name) as lab:
        yield lab


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    server = item.stash.get(_SERVER, None)
    if report.failed and server is not None and server.log.exists():
        report.sections.append((f"jupyter lab log ({server.log})", server.log_tail(item.stash[_LOG_START])))
    return report


@pytest.fixture(scope="session")
def gathered_files(tmp_path_factory) -> Path:
    """A folder holding what one spawn of 2 gloo ranks saved (tests/test_distributed.py's
    ``findings_and_run``): ``findings.hookviz``, a watch whose rank 1 explodes at step 2 and holds
    NaN at step 3, and ``run.hookviz``, rank 0's run of its first batch. Made once per session for
    the distributed tests and the command line's (``hookviz report`` of a gathered watch)."""
    pytest.importorskip("torch.distributed")
    from test_distributed import findings_and_run, spawn

    directory = tmp_path_factory.mktemp("gathered")
    spawn(findings_and_run, str(directory))
    return directory


@pytest.fixture
def canonical():
    """(session, model, (x, y, z), target) for ``2*x + 3*y - 5*z`` with MSE against [9, -1]."""
    x, y, z, target = canonical_inputs()
    model = Canonical()
    session = hookviz.Session(model, (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
    return session, model, (x, y, z), target


def watched_mlp() -> tuple:
    """``(model, data, labels, watch)``: a small MLP watched (closed) over three plain PyTorch
    steps, and the ``hookviz.Session`` of it on the same data (a fresh one per call)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    data, labels = torch.randn(16, 4), torch.randint(0, 2, (16,))
    with hookviz.watch(model) as watch:
        for _ in range(3):
            model.zero_grad()
            F.cross_entropy(model(data), labels).backward()
    session = hookviz.Session(model, (data,), loss_fn=lambda out: F.cross_entropy(out, labels))
    return model, data, watch, session


def model_state(model: torch.nn.Module, tensors=()) -> list:
    """Everything about a model (and some tensors) that hookviz must not change."""
    state = []
    for name, module in model.named_modules():
        state.append((name, module.training, module._is_full_backward_hook, sorted(vars(module))))
        state.append((name, list(module._modules.items()), list(module._parameters), list(module._buffers)))
        for attribute in (
            "_forward_pre_hooks",
            "_forward_hooks",
            "_backward_pre_hooks",
            "_backward_hooks",
            "_forward_hooks_with_kwargs",
            "_forward_pre_hooks_with_kwargs",
            "_forward_hooks_always_called",
        ):
            hooks = getattr(module, attribute)
            state.append((name, attribute, list(hooks.items())))
    for name, parameter in model.named_parameters():
        state.append(
            (
                name,
                parameter.requires_grad,
                parameter.device,
                parameter.detach().clone(),
                None if parameter.grad is None else parameter.grad.clone(),
                dict(parameter._backward_hooks or {}),
                dict(parameter._post_accumulate_grad_hooks or {}),
            )
        )
    for name, buffer in model.named_buffers():
        state.append((name, buffer.dtype, buffer.device, buffer.detach().clone()))
    for i, tensor in enumerate(tensors):
        state.append(
            (
                i,
                tensor.requires_grad,
                tensor.detach().clone(),
                None if tensor.grad is None else tensor.grad.clone(),
                dict(tensor._backward_hooks or {}),
            )
        )
    return state


def assert_same_state(before: list, after: list) -> None:
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            if isinstance(u, torch.Tensor):
                assert isinstance(v, torch.Tensor) and torch.equal(u, v)
            else:
                assert u == v, (a[0], u, v)


def as_version_2(structure):
    """A file's JSON structure as format version 2 wrote it: without version 3's ``pending`` fields
    (TensorRecord, NodeRecord, ModuleCall) and ``input_names`` (Run). For tests that forge older
    files from a new one."""
    if isinstance(structure, list):
        return [as_version_2(item) for item in structure]
    if not isinstance(structure, dict):
        return structure
    out = {key: as_version_2(value) for key, value in structure.items()}
    if "__type__" in out and isinstance(out.get("fields"), dict):
        out["fields"].pop("pending", None)
        if out["__type__"] == "Run":
            out["fields"].pop("input_names", None)
    return out
