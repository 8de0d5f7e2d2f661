"""The browser tests' one JupyterLab: started by the first test that asks for a folder in it, stopped
at the end of the test session (``harness.SharedLab``).

A test asks for ``lab_folder`` (a ``harness.Lab``: its own folder under the server's root) and
writes its notebooks there. When a test that used it fails, its report gets the server's log of
that test (kernel starts, tracebacks the server saw) beside the browser console ``diagnostics``
adds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

_LOG_START = pytest.StashKey[int]()
_SERVER = pytest.StashKey[harness.SharedLab]()


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory):
    """The session's ``jupyter lab`` (skips without a browser; fails in CI, see ``require_browser``)."""
    harness.require_browser()
    with harness.SharedLab(tmp_path_factory.mktemp("jupyter")).running() as server:
        yield server


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
