"""The code hookviz's messages advise runs: every snippet of hookviz.advice.ADVICE is executed as it
stands against real runs and watches, and no message elsewhere spells a call of hookviz's API itself.

The names a snippet uses (``model``, ``args``, ``loss_fn``, ``session``, ``run``, ``watch``, ...)
are bound to real objects: a sigmoid MLP of 8 layers whose gradients vanish, trained a few SGD
steps under ``hookviz.watch``; a model whose gradient turns NaN for the NaN advice. Each snippet's
result is checked for what the message promises (the NaN op found, the details filled, the file
loadable, the widget drawn), not only for running.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import hookviz
from hookviz.advice import ADVICE, advice
from hookviz.examples import sigmoid_mlp

PACKAGE = Path(__file__).resolve().parents[1] / "hookviz"

# A call a message advises: on hookviz or on an object of the user's (a run, a session, a watch, a
# widget, a history), or a Session made; its code belongs in hookviz.advice.ADVICE.
ADVISED = re.compile(r"\b(?:hookviz|run|session|watch|history|widget|w|s)\.[A-Za-z_]\w*\(|\bSession\(\.\.\.")


def _trained_watch(model, optimizer, batches):
    with hookviz.watch(model, optimizer=optimizer, stats_every=1) as watch:
        for x, y in batches:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    return watch


def _vanishing(tmp_path: Path) -> dict:
    """The names of the snippets, bound on a vanishing 8-layer sigmoid MLP's watch and run."""
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=8, width=16, inputs=8, classes=3, activation=nn.Sigmoid)
    x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = _trained_watch(model, optimizer, [(x, y)] * 3)

    def loss_fn(out):
        return F.cross_entropy(out, y)

    session = hookviz.Session(model, (x,), loss_fn=loss_fn)
    run = session.run()
    saved_watch = hookviz.save(watch, tmp_path / "watch.hookviz")
    return {
        "hookviz": hookviz,
        "model": model,
        "args": (x,),
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "session": session,
        "run": run,
        "watch": watch,
        "history": hookviz.load(saved_watch),
        "widget": hookviz.show(run),
        "path": tmp_path / "new.hookviz",
        "step": watch.steps[-1],
        "text": "weight",
        "target": "0.weight",
        "slot": "grad",
        "transform": "grad * 0",
    }


class _LogOfZero(nn.Module):
    """``log(lin(x) * 0)``: log's gradient at 0 is Inf, and the product's backward makes it NaN."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return torch.log(self.lin(x) * 0.0)


def _nan_finding_and_names() -> tuple[hookviz.Finding, dict]:
    """A watch's "nan" finding on a model whose gradient is NaN, and the names its snippet reads."""
    model = _LogOfZero()
    x = torch.ones(4, 2)

    def loss_fn(out):
        return out.sum()

    with hookviz.watch(model) as watch:
        loss_fn(model(x)).backward()
    nan = [f for f in watch.diagnose() if f.kind == "nan"]
    assert nan, [f.kind for f in watch.diagnose()]
    return nan[0], {"hookviz": hookviz, "model": model, "args": (x,), "loss_fn": loss_fn}


def _kept_values(page: Path) -> set[str]:
    """The node ids and module names whose inspector in a saved page holds some tensor's values."""
    import json

    text = page.read_text(encoding="utf-8")
    state = json.loads(re.search(r'id="hookviz-state">(.*?)</script>', text, re.S).group(1))

    def has_value(data) -> bool:
        if isinstance(data, dict):
            return data.get("value") is not None or any(has_value(v) for v in data.values())
        return isinstance(data, list) and any(has_value(v) for v in data)

    return {key for key, inspector in state["__inspectors"].items() if has_value(inspector)}


def _closed(result, names):
    for value in (result, *names.values()):
        if isinstance(value, hookviz.Watch) and not value.closed:
            value.close()


# What each snippet must have done, beyond running: (result, the names after it ran) -> True.
CHECKS = {
    "diagnose_a_step": lambda result, names: any(f.kind == "nan" for f in result),
    "diagnose": lambda result, names: any(f.kind == "vanishing" for f in result),
    "fill_details": lambda result, names: not names["run"].details_pending,
    "eager_session": lambda result, names: not result.run().details_pending,
    "add_edit": lambda result, names: not names["session"].run().leaf_grad("0.weight").any(),
    "new_forward": lambda result, names: isinstance(result, hookviz.Run) and result.loss.isfinite(),
    "record_run": lambda result, names: isinstance(result, hookviz.Run) and result.loss.isfinite(),
    "load_run": lambda result, names: isinstance(result, hookviz.Run) and result == names["run"],
    "diff_runs": lambda result, names: isinstance(result, hookviz.Diff),
    "save_run": lambda result, names: isinstance(hookviz.load(result), hookviz.Run),
    "save_watch": lambda result, names: len(hookviz.load(result).steps) == 3,
    "save_watch_with_run": lambda result, names: hookviz.load(result).run is not None,
    "show_saved_history": lambda result, names: result.run is not None and bool(result.watch_view),
    "show_model": lambda result, names: isinstance(result, hookviz.Widget) and bool(result.graph["nodes"]),
    "show_watch_on_graph": lambda result, names: bool(result.watch_view),
    "show_run": lambda result, names: isinstance(result, hookviz.Widget) and bool(result.graph["nodes"]),
    "show_baseline": lambda result, names: isinstance(result, hookviz.Widget) and bool(result.graph["nodes"]),
    "show_watch_on": lambda result, names: bool(result.watch_view),
    "show_history_on_run": lambda result, names: bool(result.watch_view),
    "show_watch_on_run": lambda result, names: bool(result.watch_view),
    "save_html_pinned": lambda result, names: _kept_values(result) >= {names["target"]},
    "save_html_all": lambda result, names: _kept_values(result) >= set(names["run"].nodes),
    "search": lambda result, names: result is None and not names["widget"].errors.get("search"),
    "watch": lambda result, names: isinstance(result, hookviz.Watch) and not result.closed,
    "watch_outputs": lambda result, names: isinstance(result, hookviz.Watch) and not result.closed,
    "watch_every_step": lambda result, names: isinstance(result, hookviz.Watch) and not result.closed,
    "watch_with_scaler": lambda result, names: isinstance(result, hookviz.Watch) and not result.closed,
    "close_watch": lambda result, names: names["watch"].closed,
    "loss_scale": lambda result, names: result == 1024.0,
}


def test_every_snippet_has_a_check():
    assert sorted(CHECKS) == sorted(ADVICE)


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_the_advised_code_runs(name, tmp_path):
    if name == "diagnose_a_step":
        _, names = _nan_finding_and_names()
    else:
        names = _vanishing(tmp_path)
        if name.startswith("save_html"):
            names["path"] = tmp_path / "page.html"
        if name in ("show_saved_history", "load_run", "diff_runs", "show_baseline"):
            names["path"] = hookviz.save(names["run"], tmp_path / "run.hookviz")
        if name == "close_watch":  # an open watch, as the message finds it
            names["watch"] = hookviz.watch(names["model"])
        if name == "loss_scale":  # the message's case: a GradScaler scales the gradients
            scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
            model, optimizer, loss_fn, (x,) = (
                names["model"],
                names["optimizer"],
                names["loss_fn"],
                names["args"],
            )
            with hookviz.watch(model, optimizer=optimizer, scaler=scaler) as names["watch"]:
                optimizer.zero_grad()
                scaler.scale(loss_fn(model(x))).backward()
                scaler.step(optimizer)
                scaler.update()
            names["step"] = names["watch"].steps[-1]
        if name.startswith("watch"):  # a new watch on a model that has none open
            names["model"] = sigmoid_mlp(depth=3, width=8, inputs=8, classes=3, activation=nn.Sigmoid)
            names["optimizer"] = torch.optim.SGD(names["model"].parameters(), lr=0.1)
            names["scaler"] = torch.amp.GradScaler("cpu")
    code = ADVICE[name]
    try:
        result = eval(compile(code, f"<advice {name}>", "eval"), names)  # the snippet, as a message shows it
        assert CHECKS[name](result, names), f"{code} ran but did not do what its message says"
    finally:
        _closed(locals().get("result"), names)


def test_the_nan_finding_advises_code_that_finds_the_op():
    # The chain a user follows: the watch's finding names code; that code, run, finds the NaN's op.
    finding, names = _nan_finding_and_names()
    code = advice("diagnose_a_step")
    assert code in finding.message, finding.message
    found = eval(code, names)
    nan = [f for f in found if f.kind == "nan"]
    assert nan and nan[0].node == "LogBackward0_0", [f.message for f in found]


def _messages(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string in ``path`` that is not documentation: every constant and every
    literal part of an f-string, except docstrings and bare string statements (attribute docs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in documentation
    ]


def _spelled_advice(path: Path) -> list[str]:
    return [f"{path.name}:{line}: {text!r}" for line, text in _messages(path) if ADVISED.search(text)]


def test_no_message_spells_advice_outside_the_registry():
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "advice.py"]
    assert len(files) > 50
    spelled = [hit for path in files for hit in _spelled_advice(path)]
    assert not spelled, "messages that spell code instead of taking it from hookviz.advice:\n" + "\n".join(
        spelled
    )


def test_every_advice_a_message_asks_for_is_registered():
    asked = set()
    for path in PACKAGE.rglob("*.py"):
        asked |= set(re.findall(r"\badvice\(\s*[\"'](\w+)[\"']\s*\)", path.read_text(encoding="utf-8")))
    assert asked, "no message takes its code from hookviz.advice"
    assert asked <= set(ADVICE), sorted(asked - set(ADVICE))


def test_the_scan_sees_advice_spelled_in_a_message(tmp_path):
    # The scan above is only as good as its reader: a planted message that spells code is seen, in
    # a plain string and in an f-string; a docstring that shows the same code is not a message.
    planted = tmp_path / "planted.py"
    planted.write_text(
        'def f(n):\n    """Use hookviz.diagnose(run)."""\n'
        '    raise ValueError(f"{n} steps: call run.fill_details() first")\n'
        'NOTE = "record with hookviz.Session(model, args).run()"\n'
    )
    assert sorted(hit.split(": ", 1)[0] for hit in _spelled_advice(planted)) == [
        "planted.py:3",
        "planted.py:4",
    ]
