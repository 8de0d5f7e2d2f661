"""Runs and watch histories saved to a file and opened again: exact round trips, every bad file refused."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import struct

import networkx as nx
import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from conftest import as_version_2
from torch import nn

import hookviz
from hookviz.data.run import LogEntry
from hookviz.data.tensors import TensorRecord
from hookviz.errors import FileFormatError
from hookviz.examples import TinyGPT, next_token_loss, sigmoid_mlp
from hookviz.files.saving import load, save
from hookviz.watching.gather import RankHistory, from_watch
from hookviz.widget.payload import json_float


def assert_same(a, b, where="obj"):
    """Deep equality of two loaded/saved objects: ``torch.equal`` (same dtype and shape) on every
    tensor, NaN equal to NaN, tuples stay tuples, graphs node by node and edge by edge."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a.cpu(), b.cpu()) or (
            a.is_floating_point()
            and torch.equal(a.isnan(), b.isnan())
            and torch.equal(a.nan_to_num(), b.nan_to_num())
        ), where
    elif isinstance(a, float):
        assert a == b or (math.isnan(a) and math.isnan(b)), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, nx.DiGraph):
        assert list(a.nodes) == list(b.nodes) and list(a.edges) == list(b.edges), where
        for n in a.nodes:
            assert_same(a.nodes[n], b.nodes[n], f"{where}.nodes[{n!r}]")
        for u, v in a.edges:
            assert_same(a.edges[u, v], b.edges[u, v], f"{where}.edges[{u!r}, {v!r}]")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.name in ("model_ref", "transform", "details"):
                continue
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, (where, a, b)


def stored_tensors(path) -> dict[str, torch.Tensor]:
    return safetensors.torch.load_file(str(path))


def test_run_round_trip_is_exact(tmp_path, canonical):
    session, model, _, _ = canonical
    session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    run = session.run()
    path = hookviz.save(run, tmp_path / "canonical")
    assert path.name == "canonical.hookviz" and path.exists()
    loaded = hookviz.load(path)
    assert isinstance(loaded, hookviz.Run) and loaded.model is None
    assert_same(run, loaded, "run")
    assert_same(run.graph, loaded.graph, "run.graph")  # derived from the records, so equal too
    assert torch.equal(loaded.leaf_grad("x"), torch.tensor([1777792.0, 1777764.0]))
    assert hookviz.diff(run, loaded).changed_leaves == [] and hookviz.diff(run, loaded).changed_nodes == []
    assert loaded.edits[0].source == "grad + 888888" and str(loaded.edits[0].slot) == "grad_inputs[0]"
    with pytest.raises(hookviz.HookvizError, match="loaded from a file.*session.edit"):
        loaded.edits[0].transform(torch.zeros(2))
    # the file's tensors are the run's tensors, one by one
    tensors = stored_tensors(path)
    assert len(tensors) >= len(run.leaf_grads)


def test_large_run_with_histograms_nan_and_dtypes_round_trips(tmp_path):
    torch.manual_seed(0)
    model = TinyGPT(vocab=50, context=16, layers=2, width=32, heads=2, dropout=0.1)
    tokens = torch.randint(0, 50, (2, 16))
    run = hookviz.Session(
        model, (tokens,), loss_fn=lambda out: next_token_loss(out, tokens), full_tensor_limit=64
    ).run()
    loaded = load(hookviz.save(run.fill_details(), tmp_path / "gpt.hookviz"))
    assert_same(run, loaded, "run")
    assert any(r.histogram is not None for n in loaded.nodes.values() for r in n.grad_inputs if r is not None)
    # NaN and Inf in statistics, values and gradients; half precision and integer tensors
    mlp = sigmoid_mlp(depth=3, width=8, inputs=4, classes=2)
    x = torch.full((2, 4), math.nan)
    nan_run = hookviz.Session(mlp, (x,), loss_fn=lambda out: out.sum()).run()
    assert math.isnan(nan_run.leaf_grad("0.weight")[0, 0])
    assert_same(nan_run, load(hookviz.save(nan_run, tmp_path / "nan")), "nan run")
    half = nn.Linear(3, 2).to(torch.bfloat16)
    half_run = hookviz.Session(
        half, (torch.ones(1, 3, dtype=torch.bfloat16),), loss_fn=lambda o: o.float().sum()
    ).run()
    loaded_half = load(hookviz.save(half_run, tmp_path / "half"))
    assert loaded_half.leaf_grad("weight").dtype == torch.bfloat16
    assert_same(half_run, loaded_half, "bfloat16 run")


def test_watch_history_round_trip_is_exact(tmp_path):
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=3, width=8, inputs=4, classes=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with hookviz.watch(model) as w:
        for step in range(4):
            optimizer.zero_grad()
            x = torch.randn(8, 4) if step != 2 else torch.full((8, 4), math.inf)
            F.cross_entropy(model(x), torch.zeros(8, dtype=torch.long)).backward()
    path = hookviz.save(w, tmp_path / "watch")
    loaded = hookviz.load(path)
    assert isinstance(loaded, RankHistory) and loaded.ranks == [0] and loaded.steps == [0, 1, 2, 3]
    history = w.history
    for i, statistic in enumerate(("norm", "max_abs", "nonfinite", "zero_fraction")):
        assert torch.equal(
            loaded.local[0, :, :, i].nan_to_num(-1), getattr(history, statistic).nan_to_num(-1)
        )
    assert loaded.norms(1, rank=0) == w.norms(1)
    assert loaded.diagnose() and loaded.diagnose()[0].kind == "nan" and loaded.diagnose()[0].step == 2
    assert_same(loaded, load(save(loaded, tmp_path / "again")), "history")
    with pytest.raises(hookviz.WatchError, match="one process.*rank=0"):
        loaded.norms(1)


def test_pickle_files_are_refused_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return (marker.write_text, ("code ran",))

    torch_file = tmp_path / "model.hookviz"
    torch.save({"weight": torch.ones(2), "payload": Payload()}, torch_file)
    with pytest.raises(FileFormatError, match=r"model\.hookviz.*pickle.*never unpickles"):
        load(torch_file)
    for protocol in (2, 4, 5):
        pickled = tmp_path / f"p{protocol}.hookviz"
        pickled.write_bytes(pickle.dumps(Payload(), protocol=protocol))
        with pytest.raises(FileFormatError, match=f"p{protocol}.hookviz.*pickle"):
            load(pickled)
    assert not marker.exists()


def test_truncated_corrupt_and_foreign_files_get_clear_errors(tmp_path, canonical):
    session, *_ = canonical
    good = hookviz.save(session.run(), tmp_path / "good").read_bytes()
    cases = {
        "empty": (b"", "truncated"),
        "short": (good[:5], "truncated"),
        "header_cut": (good[:200], "truncated: its header says"),
        "data_cut": (good[:-10], "corrupt or truncated"),
        "text": (b"hello, this is not a hookviz file at all" * 3, "not a hookviz file"),
    }
    (length,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8 : 8 + length])
    tensors = safetensors.torch.load(good)
    for name, text, problem in (
        ("bad_json", b'{"__type__": "Run", "fields": ', "structure is not JSON"),
        ("bad_type", b'{"__type__": "os.system"}', "run should be Run, but the file has an object"),
    ):
        broken = dict(tensors, **{"hookviz.json": torch.frombuffer(bytearray(text), dtype=torch.uint8)})
        cases[name] = (safetensors.torch.save(broken, metadata=header["__metadata__"]), problem)
    newer = dict(header, __metadata__=dict(header["__metadata__"], version="99"))
    cases["newer"] = (_with_header(newer, good, length), "version '99'.*reads versions 1, 2")
    cases["foreign"] = (safetensors.torch.save({"w": torch.ones(2)}), "not one hookviz wrote")
    for name, (data, problem) in cases.items():
        path = tmp_path / f"{name}.hookviz"
        path.write_bytes(data)
        with pytest.raises(FileFormatError, match=f"{name}\\.hookviz.*{problem}"):
            load(path)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.hookviz")
    # a good file whose header length starts with byte 0x80 (as a pickle does) still opens
    text = json.dumps(header).encode()
    text += b" " * ((0x80 - len(text)) % 256)
    lookalike = tmp_path / "lookalike.hookviz"
    lookalike.write_bytes(struct.pack("<Q", len(text)) + text + good[8 + length :])
    assert lookalike.read_bytes()[:1] == b"\x80"
    assert torch.equal(load(lookalike).leaf_grad("x"), load(tmp_path / "good.hookviz").leaf_grad("x"))
    lookalike.write_bytes(lookalike.read_bytes()[:300])
    with pytest.raises(FileFormatError, match=r"lookalike\.hookviz.*truncated"):
        load(lookalike)


def test_a_version_1_file_with_a_networkx_graph_still_opens(tmp_path, canonical):
    """Version 1 stored a Run's networkx graph; version 2 stores its edges (the graph is derived)."""
    session, *_ = canonical
    run = session.run().fill_details()  # versions 1 and 2 wrote complete records only
    data = hookviz.save(run, tmp_path / "new").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    tensors = safetensors.torch.load(data)
    structure = as_version_2(json.loads(bytes(tensors["hookviz.json"].tolist())))
    fields = structure["fields"]
    edges = [edge["__tuple__"] for edge in fields.pop("edges")]
    fields["graph"] = {
        "__graph__": {
            "attributes": {"__dict__": {}},
            "nodes": [],
            "edges": [[u, v, {"__dict__": {"slot": slot}}] for u, v, slot in edges],
        }
    }
    text = json.dumps(structure).encode()
    tensors["hookviz.json"] = torch.frombuffer(bytearray(text), dtype=torch.uint8)
    old = tmp_path / "old.hookviz"
    old.write_bytes(safetensors.torch.save(tensors, metadata=dict(header["__metadata__"], version="1")))
    loaded = load(old)
    assert sorted(loaded.edges) == sorted(run.edges)
    assert sorted(loaded.graph.edges(data="slot")) == sorted(run.graph.edges(data="slot"))
    assert hookviz.diff(run, loaded).changed_leaves == []


def _with_header(header: dict, data: bytes, length: int) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads its header to 8 bytes
    return struct.pack("<Q", len(text)) + text + data[8 + length :]


def test_saving_something_else_is_a_clear_error(tmp_path):
    with pytest.raises(hookviz.HookvizError, match="takes a hookviz.Run, a hookviz.Watch or a watch history"):
        save({"a": 1}, tmp_path / "x")
    with pytest.raises(hookviz.HookvizError, match="keeps a run with a watch or a watch history, not"):
        save(hookviz.Run(torch.tensor(1.0), "cpu", [], {}, "", {}, [], [], [], [], ()), tmp_path / "x", run=1)
    record = TensorRecord((1,), "float32", "cpu", 1, note=object())
    run = hookviz.Run(torch.tensor(1.0), "cpu", [], {}, "", {}, [], [], [], [], ())
    run.calls.append(record)
    with pytest.raises(hookviz.HookvizError, match=r"run\.calls\[0\].*TensorRecord.*has ModuleCall"):
        save(run, tmp_path / "x")
    run.calls.clear()
    run.leaf_grads["x"] = record
    with pytest.raises(hookviz.HookvizError, match=r"cannot save run\.leaf_grads\['x'\].*has torch\.Tensor"):
        save(run, tmp_path / "x")
    run.leaf_grads["x"] = torch.ones(1)
    run.log.append(LogEntry("hook", "where", object()))
    with pytest.raises(hookviz.HookvizError, match=r"cannot save run\.log\[0\]\.text.*builtins\.object"):
        save(run, tmp_path / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no temporary left


def test_a_loaded_run_opens_read_only_in_the_widget(tmp_path, canonical):
    session, *_ = canonical
    live = hookviz.Widget(session)
    loaded = hookviz.show(hookviz.load(hookviz.save(session.last_run, tmp_path / "run")))
    assert live.read_only == "" and loaded.read_only.startswith("read-only: this run was opened from a file")
    # what the page shows of the run is the same as live: graph, leaves, replay, chart, diagnosis
    for trait in ("graph", "leaf_summary", "replay", "chart", "diagnosis", "log"):
        assert getattr(loaded, trait) == getattr(live, trait), trait
    for target in ("SubBackward0_0", "x", "module:"):
        assert live.select(target) and loaded.select(target)
        assert {k: v for k, v in loaded.inspector.items() if k != "sites"} == {
            k: v for k, v in live.inspector.items() if k != "sites"
        }, target
    assert not loaded.rerun() and "read-only" in loaded.errors["rerun"]
    assert loaded.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad * 3") is None
    assert "read-only" in loaded.errors["edit"]
    reply = loaded.handle_message({"type": "rerun"})
    assert reply["ok"] is False


def test_two_loaded_runs_compare_in_the_widget_as_live_ones(tmp_path, canonical):
    session, *_ = canonical
    live = hookviz.Widget(session)
    live.apply_edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    assert live.rerun()
    before = hookviz.load(hookviz.save(session.baseline, tmp_path / "before"))
    after = hookviz.load(hookviz.save(session.last_run, tmp_path / "after"))
    loaded = hookviz.show(after, baseline=before)
    assert {**loaded.graph, "run": 0} == {**live.graph, "run": 0}  # "run" counts the widget's runs
    for trait in ("leaf_summary", "chart", "edits"):
        assert getattr(loaded, trait) == getattr(live, trait), trait
    assert "grad + 888888" in loaded.code and loaded.read_only


def test_a_one_process_history_opens_on_its_one_rank(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    data, labels = torch.randn(16, 4), torch.randint(0, 2, (16,))
    with hookviz.watch(model) as watch:
        for _ in range(3):
            model.zero_grad()
            F.cross_entropy(model(data), labels).backward()
    run = hookviz.Session(model, (data,), loss_fn=lambda out: F.cross_entropy(out, labels)).run()
    history = hookviz.load(hookviz.save(from_watch(watch), tmp_path / "history"))
    widget = hookviz.show(history, on=hookviz.load(hookviz.save(run, tmp_path / "run")))
    assert widget.watch_view["rank"] == 0 and widget.watch_view["reduced"] is False
    assert widget.watch_view["norms"] == {n: json_float(v) for n, v in watch.norms(watch.steps[-1]).items()}
