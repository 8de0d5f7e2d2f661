"""The public surface says what it takes: every function and method in ``hookviz.__all__`` is
annotated, its docstring lists under ``Raises:`` the hookviz errors it raises, every error a public
call raises is public, and bad input (a wrong type, a wrong value) is a hookviz error, never a
built-in ``TypeError``/``ValueError``/``KeyError``/``AttributeError``."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from torch import nn

import hookviz
from hookviz import errors
from hookviz.watching.gather import from_watch


def _public_callables() -> list[tuple[str, object, str]]:
    """``(qualified name, function, the docstring that documents it)`` for each public function,
    each class's own public methods and properties, and each class's ``__init__`` (documented by
    the class's docstring)."""
    found = []
    for name in hookviz.__all__:
        obj = getattr(hookviz, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            continue
        if not inspect.isclass(obj):
            found.append((name, obj, obj.__doc__ or ""))
            continue
        for member, value in vars(obj).items():
            if member.startswith("_") and member != "__init__":
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                doc = obj.__doc__ if member == "__init__" else value.__doc__
                found.append((f"{name}.{member}", value, doc or ""))
    return found


PUBLIC = _public_callables()
ERROR_NAMES = {
    n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, errors.HookvizError)
}


def test_the_surface_is_read():
    names = {q for q, _, _ in PUBLIC}
    assert {"show", "watch", "save", "load", "Session.__init__", "Session.edit", "Watch.heatmap"} <= names
    assert len(PUBLIC) > 100


@pytest.mark.parametrize("qualified, function, doc", PUBLIC, ids=[q for q, _, _ in PUBLIC])
def test_every_public_callable_is_annotated(qualified, function, doc):
    signature = inspect.signature(function)
    bare = [
        p.name
        for p in signature.parameters.values()
        if p.name not in ("self", "cls") and p.annotation is p.empty
    ]
    assert not bare, f"{qualified}: parameters without a type hint: {bare}"
    if not qualified.endswith("__init__"):
        assert signature.return_annotation is not signature.empty, f"{qualified}: no return type hint"
    assert doc.strip(), f"{qualified} has no docstring"


def _raises_section(doc: str) -> str:
    return doc.split("Raises:", 1)[1] if "Raises:" in doc else ""


@pytest.mark.parametrize("qualified, function, doc", PUBLIC, ids=[q for q, _, _ in PUBLIC])
def test_every_error_a_public_callable_raises_is_in_its_raises_section(qualified, function, doc):
    if function.__code__.co_filename == "<string>":  # a dataclass's generated __init__ raises nothing
        assert qualified.endswith("__init__")
        return
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    raised = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exception = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exception.id if isinstance(exception, ast.Name) else getattr(exception, "attr", "")
            if name in ERROR_NAMES:
                raised.add(name)
    missing = sorted(r for r in raised if r not in _raises_section(doc))
    assert not missing, f"{qualified} raises {missing} but its docstring's Raises: does not say so"


def test_every_public_function_has_a_raises_section():
    functions = [q for q, f, _ in PUBLIC if "." not in q]
    assert len(functions) == 10
    assert not [q for q, f, doc in PUBLIC if "." not in q and not _raises_section(doc).strip()]


def test_every_error_class_is_public():
    assert ERROR_NAMES - set(hookviz.__all__) == set()
    assert "ReadOnlyError" in hookviz.__all__ and hookviz.ReadOnlyError is errors.ReadOnlyError


@pytest.fixture(scope="module")
def recorded():
    """A small MLP, a session and its run, a closed watch of two plain PyTorch steps, its history."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(5, 4)
    session = hookviz.Session(model, (x,), loss_fn=lambda out: out.sum())
    run = session.run()
    with hookviz.watch(model) as watch:
        for _ in range(2):
            model.zero_grad()
            model(x).sum().backward()
    return model, x, session, run, watch, from_watch(watch)


def _bad_calls(recorded, folder):
    """``(documented by, label, call, expected error)``: for each public call, one argument of a
    wrong type and one of a wrong value."""
    model, x, session, run, watch, history = recorded
    other = hookviz.Session(
        nn.Bilinear(2, 2, 1), (torch.ones(1, 2), torch.ones(1, 2)), loss_fn=torch.sum
    ).run()
    widget = hookviz.show(run)
    return [
        ("show", "type", lambda: hookviz.show("model"), errors.HookvizError),
        (
            "show",
            "value",
            lambda: hookviz.show(model, (torch.randn(5, 3),), loss_fn=torch.sum),
            errors.ForwardError,
        ),
        ("show", "option type", lambda: hookviz.show(run, visible_budget="40"), errors.HookvizError),
        ("show", "option value", lambda: hookviz.show(run, vanishing_threshold=-1.0), errors.HookvizError),
        ("show_watch", "type", lambda: hookviz.show_watch(5, session), errors.WatchError),
        ("show_watch", "value", lambda: hookviz.show_watch(watch, session, step=999), errors.WatchError),
        ("watch", "type", lambda: hookviz.watch("model"), errors.WatchError),
        ("watch", "value", lambda: hookviz.watch(model, capacity=1), errors.WatchError),
        ("save", "type", lambda: hookviz.save(run, 5), errors.PathError),
        ("save", "object type", lambda: hookviz.save(5, folder / "five"), errors.HookvizError),
        ("save", "run type", lambda: hookviz.save(watch, folder / "w", run=5), errors.HookvizError),
        ("save", "value", lambda: hookviz.save(run, folder), errors.PathError),
        ("load", "type", lambda: hookviz.load(5), errors.PathError),
        ("load", "value", lambda: hookviz.load(folder), errors.PathError),
        ("diff", "type", lambda: hookviz.diff(5, run), errors.HookvizError),
        ("diff", "value", lambda: hookviz.diff(run, other), errors.HookvizError),
        ("compare", "type", lambda: hookviz.compare(5, watch), errors.HookvizError),
        ("compare", "value", lambda: hookviz.compare(watch, watch, factor=0.5), errors.HookvizError),
        ("diagnose", "type", lambda: hookviz.diagnose(5), errors.HookvizError),
        ("diagnose", "model type", lambda: hookviz.diagnose(run, model=5), errors.HookvizError),
        ("diagnose", "value", lambda: hookviz.diagnose(run, vanishing=-1), errors.HookvizError),
        ("explain", "type", lambda: hookviz.explain(5, "0"), errors.HookvizError),
        ("explain", "value", lambda: hookviz.explain(run, "nope"), errors.TargetError),
        ("Session.__init__", "type", lambda: hookviz.Session("model"), errors.HookvizError),
        (
            "Session.__init__",
            "kwargs type",
            lambda: hookviz.Session(model, (x,), kwargs=5),
            errors.HookvizError,
        ),
        (
            "Session.__init__",
            "loss_fn type",
            lambda: hookviz.Session(model, (x,), loss_fn=5),
            errors.LossError,
        ),
        (
            "Session.__init__",
            "limit type",
            lambda: hookviz.Session(model, (x,), full_tensor_limit="a"),
            errors.HookvizError,
        ),
        (
            "Session.__init__",
            "bins value",
            lambda: hookviz.Session(model, (x,), histogram_bins=-1),
            errors.HookvizError,
        ),
        (
            "Session.__init__",
            "value",
            lambda: hookviz.Session(model, (x,), details="all"),
            errors.HookvizError,
        ),
        ("Session.edit", "type", lambda: session.edit("0", "grad_output[0]", 5), errors.EditError),
        (
            "Session.edit",
            "value",
            lambda: session.edit("0", "grad_output[0]", "grad +"),
            errors.ExpressionError,
        ),
        ("Session.edit", "target value", lambda: session.edit("nope", "grad", "grad"), errors.TargetError),
        ("Session.run", "type", lambda: session.run(device=5), errors.DeviceError),
        ("Session.run", "value", lambda: session.run(device="tpu"), errors.DeviceError),
        ("Run.node", "type", lambda: run.node(5), errors.TargetError),
        ("Run.node", "value", lambda: run.node("nope"), errors.TargetError),
        (
            "Widget.__init__",
            "type",
            lambda: hookviz.Widget(session, visible_budget="40"),
            errors.HookvizError,
        ),
        ("Widget.__init__", "value", lambda: hookviz.Widget(session, visible_budget=0), errors.HookvizError),
        ("Widget.save_html", "type", lambda: widget.save_html(5), errors.PathError),
        (
            "Widget.save_html",
            "value",
            lambda: widget.save_html(folder / "a.html", values="some"),
            errors.HookvizError,
        ),
        ("Widget.show_watch", "type", lambda: widget.show_watch(5), errors.WatchError),
        ("Widget.show_watch", "value", lambda: widget.show_watch(watch, step=999), errors.WatchError),
        ("Widget.show_live", "type", lambda: widget.show_live(5), errors.WatchError),
        ("Widget.show_live", "value", lambda: widget.show_live(watch, every_steps=0), errors.WatchError),
        ("Widget.show_watch_history", "type", lambda: widget.show_watch_history(5), errors.WatchError),
        (
            "Widget.show_watch_history",
            "value",
            lambda: widget.show_watch_history(history, rank=7),
            errors.WatchError,
        ),
        ("Watch.norms", "type", lambda: watch.norms("last"), errors.WatchError),
        ("Watch.norms", "value", lambda: watch.norms(999), errors.WatchError),
        ("Watch.heatmap", "type", lambda: watch.heatmap(5), errors.WatchError),
        ("Watch.heatmap", "value", lambda: watch.heatmap("parameter", "mean"), errors.WatchError),
        ("Watch.diagnose", "type", lambda: watch.diagnose("last"), errors.WatchError),
        ("Watch.diagnose", "value", lambda: watch.diagnose(999), errors.WatchError),
        ("Watch.lines", "value", lambda: watch.lines(["nope"]), errors.WatchError),
        ("RankHistory.history", "type", lambda: history.history("zero"), errors.WatchError),
        ("RankHistory.history", "value", lambda: history.history(7), errors.WatchError),
    ]


def test_bad_input_is_a_hookviz_error_that_the_docstring_names(recorded, tmp_path):
    docs = {q: doc for q, _, doc in PUBLIC}
    calls = _bad_calls(recorded, tmp_path)
    compared, wrong = 0, []
    for qualified, label, call, expected in calls:
        try:
            call()
        except errors.HookvizError as error:
            documented = [cls.__name__ for cls in type(error).__mro__ if cls.__name__ in ERROR_NAMES]
            if not isinstance(error, expected):
                wrong.append(
                    (qualified, label, f"raised {type(error).__name__}, expected {expected.__name__}")
                )
            elif not any(name in _raises_section(docs[qualified]) for name in documented):
                wrong.append((qualified, label, f"{type(error).__name__} is not under Raises:"))
        except Exception as error:
            wrong.append((qualified, label, f"a built-in {type(error).__name__}: {error}"))
        else:
            wrong.append((qualified, label, "no error"))
        compared += 1
    assert not wrong
    assert compared == len(calls)
    assert {q for q, *_ in calls} >= {q for q, _, _ in PUBLIC if "." not in q} - {"devices"}


def test_devices_takes_nothing_and_lists_the_cpu_first():
    assert hookviz.devices()[0] == "cpu"
    assert list(inspect.signature(hookviz.devices).parameters) == []
