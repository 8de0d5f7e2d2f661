"""Files a user can trust: saving writes only its target, reading refuses every malformed file with
a FileFormatError naming it, the schema is the dataclasses', and files saved by earlier hookviz open."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import struct
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from pathlib import Path

import pytest
import safetensors.torch
import torch
import torch.nn.functional as F
from conftest import as_version_2

import hookviz
from hookviz.errors import FileFormatError
from hookviz.examples import Canonical, canonical_inputs, sigmoid_mlp
from hookviz.files import paths, schema
from hookviz.files.fields import compiled
from hookviz.files.saving import load, save

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def good_file(tmp_path_factory) -> Path:
    """The canonical run with one edit, saved: the file every malformed case starts from."""
    x, y, z, target = canonical_inputs()
    # lazy: the file holds pending records too, which the malformed cases change
    session = hookviz.Session(
        Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target), details="lazy"
    )
    session.edit("SubBackward0_0", "grad_inputs[0]", "grad + 888888")
    return hookviz.save(session.run(), tmp_path_factory.mktemp("good") / "good")


def plain_edited_grads() -> dict[str, torch.Tensor]:
    """The canonical example's leaf gradients in plain PyTorch, with ``grad + 888888`` on the first
    grad_input of the subtraction (what the saved edit did)."""
    x, y, z, target = canonical_inputs()
    out = 2 * x + 3 * y - 5 * z
    out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] + 888888, grad_inputs[1]))
    F.mse_loss(out, target).backward()
    return {"x": x.grad, "y": y.grad, "z": z.grad}


def parts(path: Path) -> tuple[dict, dict, dict[str, torch.Tensor]]:
    """(safetensors header, structure JSON, tensors without the structure) of a hookviz file."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    tensors = safetensors.torch.load(data)
    structure = json.loads(tensors.pop("hookviz.json").numpy().tobytes())
    return json.loads(data[8 : 8 + length]), structure, tensors


def write_structure(path: Path, metadata: dict, structure, tensors: dict[str, torch.Tensor]) -> Path:
    """A file with the given structure (any JSON value, or raw bytes) and tensors, as save() lays it out."""
    text = structure if isinstance(structure, bytes) else json.dumps(structure).encode()
    stored = dict(tensors, **{"hookviz.json": torch.frombuffer(bytearray(text), dtype=torch.uint8)})
    path.write_bytes(safetensors.torch.save(stored, metadata=metadata))
    return path


def read_bytes_so_far() -> int:
    """Bytes this process has read through read() calls (Linux ``/proc/self/io`` rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


# ---------------------------------------------------------------------------- saving


def test_a_symlink_at_the_old_temporary_name_is_never_written_through(tmp_path, good_file):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = load(good_file)
    planted = tmp_path / "run.hookviz.partial"  # the fixed name hookviz used to write first
    planted.symlink_to(victim)
    path = save(run, tmp_path / "run")
    assert victim.read_text() == "precious"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert not path.is_symlink() and torch.equal(load(path).leaf_grad("x"), run.leaf_grad("x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.hookviz", "run.hookviz.partial", "victim.txt"]


def test_a_symlink_at_the_target_is_replaced_and_what_it_points_to_is_untouched(tmp_path, good_file):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "run.hookviz"
    target.symlink_to(victim)
    save(load(good_file), target)
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and target.is_file()
    assert torch.equal(load(target).leaf_grad("x"), plain_edited_grads()["x"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.hookviz", "victim.txt"]


def test_a_planted_symlink_at_the_temporary_name_is_skipped_never_followed(tmp_path, good_file, monkeypatch):
    # The temporary's name is random; plant a symlink at exactly the first name it will draw.
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(paths.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".run.hookviz.aaaa.partial").symlink_to(victim)
    save(load(good_file), tmp_path / "run")
    assert victim.read_text() == "precious"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".run.hookviz.aaaa.partial", "run.hookviz", "victim.txt"]


def canonical_widget():
    """``hookviz.show`` of the canonical example: the widget whose page save_html writes."""
    x, y, z, target = canonical_inputs()
    return hookviz.show(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))


@pytest.mark.parametrize("writer", ["save", "save_html"])
def test_a_target_that_names_no_file_is_refused_before_anything_is_written(
    tmp_path, good_file, monkeypatch, writer
):
    run = load(good_file)
    widget = canonical_widget() if writer == "save_html" else None

    def write(path):
        return save(run, path) if writer == "save" else widget.save_html(path)

    monkeypatch.chdir(tmp_path)  # "", "." and ".." name the working folder and its parent
    (tmp_path / "runs").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "inside").write_text("kept")
    (tmp_path / "taken.hookviz").mkdir()
    (tmp_path / "taken.html").mkdir()
    cases = {
        "": "no file name given",
        ".": r"'\.' names a folder, not a file: give a file name, e\.g\. '\./",
        "..": r"'\.\.' names a folder",
        "/": "'/' names a folder",
        "runs/": "'runs/' names a folder, not a file: give a file name, e.g. 'runs/",
        "missing/": "'missing/' names a folder",
        "runs": "'runs' is a folder, not a file: give a file name, e.g. 'runs/",
        "full": "'full' is a folder",
        "taken.hookviz" if writer == "save" else "taken.html": "is a folder, not a file",
        "missing/run": "its folder 'missing' does not exist; create the folder first",
        "taken.html/page.html/run": "its folder 'taken.html/page.html' does not exist",
    }
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    refused = 0
    for target, problem in cases.items():
        with pytest.raises(hookviz.PathError, match=problem) as raised:
            write(target)
        assert isinstance(raised.value, OSError) and isinstance(raised.value, hookviz.HookvizError)
        refused += 1
    assert refused == len(cases) == 11
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    # a file name in the folder, or beside it, is written
    written = write("runs/run" if writer == "save" else "runs/page.html")
    assert written.is_file() and written.parent.name == "runs"


def test_a_save_whose_write_fails_leaves_nothing_behind(tmp_path, good_file):
    # A real write error: the process may write files of at most 4 KiB (RLIMIT_FSIZE), the file is
    # ~22 KB, so write() fails with EFBIG as on a full disk.
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        from hookviz.files.saving import load, save
        run = load({str(good_file)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            save(run, {str(tmp_path / "run")!r})
        except OSError as error:
            print("refused", error.errno)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.stdout.startswith("refused"), result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_save_html_replaces_a_symlink_at_the_target_and_never_writes_through_one(tmp_path, monkeypatch):
    widget = canonical_widget()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "page.html"
    target.symlink_to(victim)
    names = iter(["aaaa", "bbbb"])
    monkeypatch.setattr(paths.secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".page.html.aaaa.partial").symlink_to(victim)  # the first temporary name drawn
    assert widget.save_html(target) == target
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and 'id="hookviz-state"' in target.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".page.html.aaaa.partial",
        "page.html",
        "victim.txt",
    ]


def test_a_save_html_whose_write_fails_leaves_the_old_page_whole(tmp_path):
    # As for save: the page (over 1 MB, the bundle is in it) meets a 4 KiB RLIMIT_FSIZE, so write()
    # fails with EFBIG as on a full disk. Written in place, the old page would be cut to 4 KiB.
    page = tmp_path / "page.html"
    page.write_text("<p>the page as it was</p>")
    script = textwrap.dedent(
        f"""
        import resource, signal
        import torch.nn.functional as F
        import hookviz
        from hookviz.examples import Canonical, canonical_inputs
        x, y, z, target = canonical_inputs()
        widget = hookviz.show(Canonical(), (x, y, z), loss_fn=lambda out: F.mse_loss(out, target))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            widget.save_html({str(page)!r})
        except OSError as error:
            print("refused", error.errno)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.stdout.startswith("refused"), result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == [page] and page.read_text() == "<p>the page as it was</p>"


# ---------------------------------------------------------------------------- reading


@pytest.mark.parametrize("kind", ["FIFO", "folder", "device"])
def test_load_refuses_what_is_not_a_regular_file_without_blocking(tmp_path, kind):
    if kind == "FIFO":
        path = tmp_path / "pipe.hookviz"
        os.mkfifo(path)  # opened for reading, a FIFO with no writer blocks until one comes
    elif kind == "folder":
        path = tmp_path / "runs.hookviz"
        path.mkdir()
    else:
        path = Path(os.devnull)
    outcome: list = []

    def attempt():
        try:
            load(path)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread below
            outcome.append(error)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout=30)
    if thread.is_alive() and kind == "FIFO":
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # a writer frees the blocked reader
        thread.join(timeout=30)
        pytest.fail("load() blocked on a FIFO")
    assert len(outcome) == 1 and isinstance(outcome[0], hookviz.PathError), outcome
    words = {"FIFO": "a FIFO (named pipe)", "folder": "a folder", "device": "a device"}[kind]
    fix = "give the path of a file that hookviz.save wrote"
    assert str(outcome[0]) == f"cannot open {str(path)!r}: it is {words}, not a file; {fix}"


def test_files_saved_by_hookviz_before_the_schema_open(tmp_path):
    run = load(DATA / "main-v2-run.hookviz")
    plain = plain_edited_grads()
    assert sorted(run.leaf_grads) == ["x", "y", "z"]
    for name, grad in plain.items():
        assert torch.equal(run.leaf_grad(name), grad), name
    assert [e.source for e in run.edits] == ["grad + 888888"]
    # the watch history: what load gives is exactly what the file stores (its own tensor, read
    # with safetensors alone) ...
    path = DATA / "main-v2-watch.hookviz"
    history = load(path)
    stored = safetensors.torch.load_file(path)
    layout = json.loads(bytes(stored["hookviz.json"].tolist()))["fields"]
    for field in ("local", "reduced"):  # NaN: a statistic that was not measured, NaN in both
        torch.testing.assert_close(
            getattr(history, field), stored[layout[field]["__tensor__"]], rtol=0, atol=0, equal_nan=True
        )
    # ... and agrees with gradients recomputed here to float32's precision: the file was recorded on
    # another CPU, whose matmul kernels (AVX-512 against AVX2) may round a float32 backward differently.
    torch.manual_seed(0)
    model = sigmoid_mlp(depth=2, width=4, inputs=3, classes=2)
    compared = 0
    for step in range(3):
        model.zero_grad()
        F.cross_entropy(model(torch.randn(4, 3)), torch.zeros(4, dtype=torch.long)).backward()
        for name, parameter in model.named_parameters():
            row = history.local[0, step, history.names.index(name)]
            torch.testing.assert_close(row[1].item(), parameter.grad.abs().max().item(), rtol=1e-6, atol=0)
            torch.testing.assert_close(
                row[0].item(), parameter.grad.double().norm().item(), rtol=1e-6, atol=0
            )
            compared += 1
    assert compared == 3 * 4
    # and they save again, and round trip
    again = load(save(run, tmp_path / "again"))
    assert all(torch.equal(again.leaf_grad(n), plain[n]) for n in plain)


def test_the_schema_is_the_records_fields():
    compared = 0
    for name, (module, fields) in schema.RECORDS.items():
        cls = getattr(__import__(module, fromlist=[name]), name)
        skipped = schema.SKIPPED.get(name, ())
        annotated = {f.name: f.type for f in dataclasses.fields(cls) if f.name not in skipped}
        assert list(fields) == list(annotated), name
        for field, kind in fields.items():
            expected = schema.REFINED.get((name, field), kind)
            assert annotated[field] == expected, (name, field)
            compared += 1
    assert compared == sum(len(f) for _, f in schema.RECORDS.values()) > 100
    assert set(schema.KINDS.values()) <= set(schema.RECORDS)
    for version in schema.READABLE:  # every type parses, and every record it names is listed
        assert set(compiled(version).classes) == set(schema.RECORDS)


def test_a_huge_file_that_is_not_hookviz_is_refused_after_its_first_bytes(tmp_path):
    size = 600 * 2**20
    cases = {
        "checkpoint.pt": (b"\x80\x04\x95" + b"\x00" * 13, "pickle"),
        "checkpoint.zip": (b"PK\x03\x04" + b"\x00" * 12, "pickle"),
        "model.safetensors": (None, "not one hookviz wrote"),
        "claims_more.hookviz": (None, "truncated"),
        "random.bin": (bytes(range(16)), "not a hookviz file"),
    }
    for name, (start, problem) in cases.items():
        path = tmp_path / name
        if start is None:  # a safetensors header saying 600 MB (or 2x that) of tensor data follow
            metadata = {"format": "hookviz", "version": "2", "kind": "run"} if "hookviz" in name else {}
            span = size * (2 if "claims" in name else 1)
            tensor = {"dtype": "U8", "shape": [span], "data_offsets": [0, span]}
            header = {"w": tensor, "__metadata__": metadata}
            text = json.dumps(header).encode()
            start = struct.pack("<Q", len(text)) + text
        with open(path, "wb") as file:
            file.write(start)
            file.truncate(size)  # sparse: takes no disk, reads as zeros
        tracemalloc.start()
        before = read_bytes_so_far()
        with pytest.raises(FileFormatError, match=f"{name}.*{problem}"):
            load(path)
        read = read_bytes_so_far() - before
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert read < 64 * 1024, (name, read)
        assert peak < 1024 * 1024, (name, peak)


def test_every_malformed_structure_is_a_file_format_error_naming_the_problem(tmp_path, good_file):
    header, structure, tensors = parts(good_file)
    metadata = header["__metadata__"]
    fields = structure["fields"]
    node = next(iter(fields["nodes"]["__dict__"]))
    edit = fields["edits"]["__tuple__"][0]["fields"]

    def changed(change):
        copy = json.loads(json.dumps(structure))
        change(copy)
        return copy

    def set_edit(**values):
        return changed(lambda s: s["fields"]["edits"]["__tuple__"][0]["fields"].update(values))

    def set_run(**values):
        return changed(lambda s: s["fields"].update(values))

    def set_x_gradient(**values):
        def change(s):
            s["fields"]["nodes"]["__dict__"]["x"]["fields"]["grad_outputs"]["__tuple__"][0]["fields"].update(
                values
            )

        return changed(change)

    deep = 100_000
    cases = {
        "deep_list": (b"[" * deep + b"]" * deep, "structure nests deeper"),
        "deep_tuple": (
            set_run(edges=json.loads('{"__tuple__": [' * 50 + "]}" * 50)),
            r"run\.edges\[0\] should have 3 items",
        ),
        "unknown_type": (
            changed(lambda s: s["fields"]["edits"]["__tuple__"][0].update(__type__="Popen")),
            r"run\.edits\[0\] should be Edit",
        ),
        "unknown_field": (
            set_run(surprise=1),
            r"Run with unknown fields \['surprise'\]",
        ),
        "missing_field": (changed(lambda s: s["fields"].pop("root")), r"Run without the fields \['root'\]"),
        "str_as_list": (
            set_run(notes="a note"),
            r"run\.notes should be a sequence of str, but the file has str",
        ),
        "int_as_str": (
            changed(lambda s: s["fields"]["nodes"]["__dict__"][node]["fields"].update(module_call="0")),
            rf"run\.nodes\['{node}'\]\.module_call should be int",
        ),
        "bool_as_int": (
            set_run(forward_reused=1),
            r"run\.forward_reused should be bool",
        ),
        "float_as_text": (
            set_x_gradient(norm={"__float__": "1e999999"}),
            r"\.norm should be float, but the file has an object",
        ),
        "missing_tensor": (changed(lambda s: s["fields"]["loss"].update(__tensor__="t999")), "lacks"),
        "tensor_layout": (
            changed(lambda s: s["fields"]["loss"].update(layout="sparse_csr")),
            "unknown tensor layout",
        ),
        "graph_attributes": (
            set_run(edges={"__graph__": {"attributes": {"__dict__": {"incoming_graph_data": 3}}}}),
            r"run\.edges should be a sequence",
        ),
        "newline_in_source": (
            set_edit(source="grad\nimport os; os.system('x')"),
            r"run\.edits\[0\]\.source: the edit source .* is neither an edit expression nor a callable",
        ),
        "code_in_source": (
            set_edit(source="__import__('os')"),
            r"neither an edit expression",
        ),
        "code_in_id": (
            set_edit(id="e1(grad)\nimport os"),
            r"run\.edits\[0\]\.id should be a Python identifier",
        ),
        "list_top": ([], "run should be Run, but the file has a list of 0"),
        "not_utf8": (b"\xff\xfe", "structure is not JSON"),
    }
    assert edit["source"] == "grad + 888888"
    for name, (value, problem) in cases.items():
        path = write_structure(tmp_path / f"{name}.hookviz", metadata, value, tensors)
        with pytest.raises(FileFormatError, match=f"{name}\\.hookviz': the file is corrupt: .*{problem}"):
            load(path)
    # the version-1 graph field is read only in version-1 files; there, a bad one is refused too
    old = dict(metadata, version="1")
    bad_graph = as_version_2(set_run(graph={"__graph__": {"edges": [["a", "b", {}]]}}))
    bad_graph["fields"].pop("edges")
    with pytest.raises(FileFormatError, match=r"run\.graph's edge 0 is not"):
        load(write_structure(tmp_path / "v1.hookviz", old, bad_graph, tensors))


def test_schema_valid_but_absurd_values_are_refused_naming_the_place(tmp_path, good_file):
    """Values of the right type that no run has, each of which broke a later read when loaded: a
    norm of 10**400 (OverflowError in diagnose, show, save), an order of 10**30 (TypeError in
    show), a loss of three elements (RuntimeError in repr), a count None in a record that waits for
    nothing (TypeError in diagnose), and their kind in other fields."""
    header, structure, tensors = parts(good_file)
    metadata = header["__metadata__"]
    x_gradient = ("nodes", "__dict__", "x", "fields", "grad_outputs", "__tuple__", 0, "fields")
    x_node = ("nodes", "__dict__", "x", "fields")

    def changed(place: tuple, **values):
        copy = json.loads(json.dumps(structure))
        record = copy["fields"]
        for key in place:
            record = record[key]
        record.update(values)
        return copy

    def edge_slot(slot):
        copy = json.loads(json.dumps(structure))
        copy["fields"]["edges"][0]["__tuple__"][2] = slot
        return copy

    x, x_grad = r"run\.nodes\['x'\]", r"run\.nodes\['x'\]\.grad_outputs\[0\]"
    loss_key = structure["fields"]["loss"]["__tensor__"]
    cases = {
        "norm": (changed(x_gradient, norm=10**400), rf"{x_grad}\.norm is an integer of 1329 bits, too large"),
        "mean": (changed(x_gradient, mean=-(10**400)), rf"{x_grad}\.mean is an integer of 1329 bits"),
        "order": (changed(x_node, order=10**30), rf"{x}\.order is an integer of 100 bits, past int64"),
        "negative_order": (changed(x_node, order=-1), rf"{x}\.order is -1, but it is a count, a size"),
        "numel": (changed(x_gradient, numel=-4), rf"{x_grad}\.numel is -4"),
        "shape": (changed(x_gradient, shape={"__tuple__": [2, -1]}), rf"{x_grad}\.shape\[1\] is -1"),
        "zero_fraction": (
            changed(x_gradient, zero_fraction=1.5),
            r"\.zero_fraction is 1\.5, but it is a fraction",
        ),
        "slot": (edge_slot(2**63), r"run\.edges\[0\]\[2\] is an integer of 64 bits, past int64"),
        "loss": ("three elements", r"run\.loss has shape \[3\], but it should have shape \[\]"),
        "overview": (
            changed(x_gradient, overview={"__tensor__": loss_key}),
            rf"{x_grad}\.overview has shape \[\], but it should have shape \[any, any\]",
        ),
        # a lazy run's record keeps None where it waits; a record that waits for nothing has values
        "not_pending": (
            changed(x_gradient, pending={"__tuple__": ["value", "mean", "min", "max", "histogram"]}),
            rf"{x_grad}\.nan_count is None, but the record's pending does not name it",
        ),
        "call_not_pending": (
            changed(("calls", 0, "fields"), pending={"__tuple__": ["output", "output_replaced"]}),
            r"run\.calls\[0\]\.inputs is None, but the record's pending does not name it",
        ),
    }
    refused = 0
    for name, (value, problem) in cases.items():
        stored = dict(tensors)
        if value == "three elements":
            value, stored[loss_key] = structure, torch.ones(3)
        path = write_structure(tmp_path / f"{name}.hookviz", metadata, value, stored)
        with pytest.raises(FileFormatError, match=f"{name}\\.hookviz': the file is corrupt: .*{problem}"):
            load(path)
        refused += 1
    assert refused == len(cases) == 12
    # the bounds hold when saving too: a run holding such a value is not written
    run = load(good_file)
    run.loss = torch.ones(3)
    with pytest.raises(hookviz.HookvizError, match=r"cannot save run\.loss: it has shape \[3\]"):
        save(run, tmp_path / "three")
    assert not (tmp_path / "three.hookviz").exists()


def test_a_watch_history_whose_shapes_disagree_is_refused_naming_the_field(tmp_path):
    # the history of a real watch (4 parameters and 4 module outputs of an MLP over 3 steps), saved anew
    header, structure, tensors = parts(save(load(DATA / "main-v2-watch.hookviz"), tmp_path / "watch"))
    fields = structure["fields"]
    assert fields["ranks"] == [0] and fields["steps"] == [0, 1, 2] and len(fields["names"]) == 8

    def changed(**values):
        return dict(structure, fields=dict(fields, **values)), tensors

    def tensor(name, value):
        return structure, dict(tensors, **{fields[name]["__tensor__"]: value})

    expected = r"but it should have shape \[ranks=1, steps=3, names=8, 4\]"
    cases = {
        "local": (tensor("local", torch.zeros(1, 3, 4)), rf"watch\.local has shape \[1, 3, 4\], {expected}"),
        "reduced": (tensor("reduced", torch.zeros(3, 4, 4, 4)), r"watch\.reduced has shape \[3, 4, 4, 4\]"),
        "order": (tensor("order", torch.zeros(4)), r"watch\.order has shape \[4\], but it should have shape"),
        "names": (
            changed(names=fields["names"][:2]),
            r"watch\.kinds has 8 items, but it should have 2, one per",
        ),
        "ranks": (
            changed(ranks=[]),
            r"watch\.local has shape \[1, 3, 8, 4\], but it should have shape \[ranks=0",
        ),
        "steps": (changed(steps=[0, 1, 2**64]), r"watch\.steps\[2\] is an integer of 65 bits, past int64"),
        "every": (changed(every=-2), r"watch\.every is -2, but it is a count"),
    }
    for name, ((value, stored), problem) in cases.items():
        path = write_structure(tmp_path / f"{name}.hookviz", header["__metadata__"], value, stored)
        with pytest.raises(FileFormatError, match=f"{name}\\.hookviz': the file is corrupt: {problem}"):
            load(path)
    assert len(cases) == 7
    # no rank at all, with tensors that agree: still refused (show would index rank 0)
    value, stored = changed(ranks=[])
    stored = dict(
        stored, **{fields[k]["__tensor__"]: tensors[fields[k]["__tensor__"]][:0] for k in ("local", "order")}
    )
    with pytest.raises(FileFormatError, match=r"watch\.ranks is empty, but it should hold at least one item"):
        load(write_structure(tmp_path / "no_rank.hookviz", header["__metadata__"], value, stored))


def _peak_growth(action) -> tuple[object, int]:
    """``action()``'s result and the bytes by which this process's peak resident memory rose above
    its resident memory before it (Linux: VmHWM is reset through /proc/self/clear_refs)."""

    def status(field: str) -> int:
        text = Path("/proc/self/status").read_text()
        return int(next(line.split()[1] for line in text.splitlines() if line.startswith(field))) * 1024

    gc.collect()
    before = status("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")
    result = action()
    return result, status("VmHWM:") - before


def test_loading_costs_a_small_multiple_of_the_file_whatever_it_references(tmp_path):
    # A real sparse gradient of a million elements (an embedding's, every row used), stored dense
    # (4 MB); the file is then given 99 more references to it, each asking for a sparse COO tensor.
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(250_000, 4, sparse=True)
    tokens = torch.arange(250_000)
    run = hookviz.Session(embedding, (tokens,), loss_fn=lambda out: out.sum()).run()
    plain = torch.ones(250_000, 4)  # d(sum)/d(weight): one use of every row
    assert run.leaf_grad("weight").is_sparse and torch.equal(run.leaf_grad("weight").to_dense(), plain)
    header, structure, tensors = parts(save(run, tmp_path / "embedding"))
    leaf_grads = structure["fields"]["leaf_grads"]["__dict__"]
    assert leaf_grads["weight"]["layout"] == "sparse_coo"
    for i in range(99):
        leaf_grads[f"copy{i}"] = leaf_grads["weight"]
    path = write_structure(tmp_path / "references.hookviz", header["__metadata__"], structure, tensors)
    size = path.stat().st_size
    assert 4_000_000 < size < 4_100_000
    loaded, growth = _peak_growth(lambda: load(path))
    references = [loaded.leaf_grads[n] for n in loaded.leaf_grads if n == "weight" or n.startswith("copy")]
    assert len(references) == 100 and len({id(r) for r in references}) == 1  # made sparse once
    assert references[0].is_sparse and torch.equal(references[0].to_dense(), plain)
    # each reference made sparse again took 16 MB (a 1.6 GB load); once, it is a few times the file
    assert growth < 16 * size, (growth, size)


def test_sparse_references_that_would_take_more_than_their_budget_are_refused(tmp_path, good_file):
    # A COO tensor keeps an int64 index per dimension per element: a 40-dimension bool tensor of
    # 50,000 True elements (50 KB stored) would take 16 MB as one, over 16 times the file.
    header, structure, tensors = parts(good_file)
    structure["fields"]["leaf_grads"]["__dict__"]["x"] = {"__tensor__": "wide", "layout": "sparse_coo"}
    stored = dict(tensors, wide=torch.ones((1,) * 39 + (50_000,), dtype=torch.bool))
    path = write_structure(tmp_path / "wide.hookviz", header["__metadata__"], structure, stored)
    refused, growth = _peak_growth(lambda: pytest.raises(FileFormatError, load, path))
    where = r"run\.leaf_grads\['x'\] asks for tensor 'wide' as a sparse COO tensor"
    refused.match(rf"{where}, which would take 16050000 bytes: the file's sparse tensors may take 16 times")
    assert growth < 8_000_000, growth  # refused before it is made


def _mutations(structure, rng: random.Random, count: int):
    """``count`` copies of a structure, each with one value somewhere replaced by a hostile one."""
    hostile = [
        None, True, 0, -1, 2**70, 1.5, "", "x\n", [], {}, [[]], {"__tuple__": 3}, {"__dict__": []},
        {"__type__": "Run", "fields": {}}, {"__type__": "Slot"}, {"__tensor__": 0}, {"__tensor__": "t0"},
        {"__float__": "nan"}, {"__float__": 1}, {"__graph__": None}, {"__items__": [[1, 2]]},
    ]  # fmt: skip
    for _ in range(count):
        copy = json.loads(json.dumps(structure))
        places = []

        def walk(value, depth, found):
            if isinstance(value, (dict, list)):
                for key, child in value.items() if isinstance(value, dict) else enumerate(value):
                    found.append((value, key))
                    if depth < 12:
                        walk(child, depth + 1, found)

        walk(copy, 0, places)
        container, key = rng.choice(places)
        container[key] = rng.choice(hostile)
        yield copy


def read_every_way(run: hookviz.Run, folder: Path) -> None:
    """Read a loaded run as a user would: repr, diagnose, explain every node, the widget with every
    inspector, a saved page, and saving it again; any error but a HookvizError fails the test."""
    for read in (
        lambda: repr(run),
        lambda: hookviz.diagnose(run),
        lambda: [hookviz.explain(run, node) for node in run.nodes],
        lambda: load(save(run, folder / "again")),
    ):
        try:
            read()
        except hookviz.HookvizError:
            pass
    widget = hookviz.show(run)
    for target in [*run.nodes, *(f"module:{call.module}" for call in run.calls)]:
        widget.select(target)
    widget.save_html(folder / "page.html", values="all")


def test_fuzzed_files_load_or_raise_file_format_error_only(tmp_path, good_file):
    """Seeded and bounded: truncations, byte flips, crafted headers and crafted structures of one real
    file. Each either loads (a flipped byte inside tensor data is a valid file with another value) or
    raises FileFormatError naming the file; nothing else escapes."""
    rng = random.Random(34)
    data = good_file.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header, structure, tensors = parts(good_file)
    cases: list[bytes] = []
    cases += [data[: rng.randrange(len(data))] for _ in range(150)]
    for _ in range(250):
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            flipped[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        cases.append(bytes(flipped))
    for _ in range(100):  # a flip inside the header, where every byte matters
        flipped = bytearray(data)
        flipped[rng.randrange(8 + length)] ^= 1 << rng.randrange(8)
        cases.append(bytes(flipped))
    crafted_headers = []
    for _ in range(100):
        crafted = json.loads(json.dumps(header))
        entry = crafted[rng.choice([k for k in crafted if k != "__metadata__"])]
        choice = rng.randrange(6)
        if choice == 0:
            entry["data_offsets"] = [rng.randrange(-5, 10**12), rng.randrange(-5, 10**12)]
        elif choice == 1:
            entry["shape"] = [rng.randrange(-2, 10**9) for _ in range(rng.randrange(4))]
        elif choice == 2:
            entry["dtype"] = rng.choice(["F64", "Q8", "", 5, None])
        elif choice == 3:
            key = rng.choice(["version", "kind", "format"])
            crafted["__metadata__"][key] = rng.choice(["1", "3", "", "run"])
        elif choice == 4:
            crafted[rng.choice(["extra", "__metadata__"])] = rng.choice([None, [], "x", {"dtype": "F32"}])
        else:
            entry.update(rng.choice([{"data_offsets": None}, {"shape": "2"}, {"data_offsets": [1]}]))
        text = json.dumps(crafted).encode()
        text += b" " * (-len(text) % 8)
        crafted_headers.append(struct.pack("<Q", len(text)) + text + data[8 + length :])
        # and a header length that lies
        lie = rng.choice([0, 1, length - 1, length + 8, 2**63, 10**8 - 1])
        crafted_headers.append(struct.pack("<Q", lie) + data[8:])
    cases += crafted_headers
    metadata = header["__metadata__"]
    for mutated in _mutations(structure, rng, 300):
        text = json.dumps(mutated).encode()
        stored = dict(tensors, **{"hookviz.json": torch.frombuffer(bytearray(text), dtype=torch.uint8)})
        cases.append(safetensors.torch.save(stored, metadata=metadata))
    outcomes = {"loaded": 0, "refused": 0}
    path = tmp_path / "fuzzed.hookviz"
    for number, case in enumerate(cases):
        path.write_bytes(case)
        try:
            loaded = load(path)
        except FileFormatError as error:
            assert "fuzzed.hookviz" in str(error), (number, error)
            outcomes["refused"] += 1
            continue
        # what loads is a Run whose records are of the schema's types, usable as any Run: every
        # read answers or raises a HookvizError (diagnose: its details were never recorded)
        assert isinstance(loaded, hookviz.Run), number
        assert isinstance(loaded.leaf_grads, dict) and all(isinstance(e, str) for e in loaded.notes)
        read_every_way(loaded, tmp_path)
        outcomes["loaded"] += 1
    assert sum(outcomes.values()) == len(cases) == 1000
    # every truncation, header flip, crafted header and most crafted structures are refused
    assert outcomes["refused"] > 600 and outcomes["loaded"] > 30, outcomes
