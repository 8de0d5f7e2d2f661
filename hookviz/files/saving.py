"""Save a run or a watch history to one file and open it later, on any machine, without unpickling.

A hookviz file (suffix ``.hookviz``) is a plain safetensors file
(https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON header, then
the raw bytes of every tensor. Every tensor the object holds (leaf gradients, kept gradient values,
watch statistics) is one safetensors tensor, named ``t0``, ``t1``, ...; the structure around them
(records, names, numbers) is UTF-8 JSON, stored as the uint8 tensor ``hookviz.json`` (a big graph's
JSON outgrows the 100 MB that safetensors allows its header). The header's ``__metadata__`` says
``"format": "hookviz"``, ``"version"`` and ``"kind"`` (``"run"`` or ``"watch"``).

What the structure may hold is :mod:`hookviz.files.schema`: records are written and read field by
field against it, and a file is refused unless every value has the type the schema gives it and
keeps its bounds (every int an int64, every float a float64, counts 0 or more, a loss of 0
dimensions: :mod:`hookviz.files.fields`). Reading parses that JSON and hands the tensor bytes to
safetensors, which only copies bytes into tensors: nothing in a file can run code, so a file from
someone else is safe to open. A ``torch.save`` / pickle file, or any file without a hookviz header,
is refused after reading its first bytes.

Loading costs a small multiple of the file's size, whatever the structure references: a tensor
referenced many times is one tensor, a sparse COO tensor (stored dense) is made sparse once per
stored tensor, and the sparse tensors of one file may take at most :data:`SPARSE_EXPANSION` times the
file's size (their int64 indices take 8 bytes per dimension per element).

Writing and reading go through :mod:`hookviz.files.paths`: a target that is not a file name is
refused, a file is written to an exclusive temporary and renamed (never through a symlink), and
only a regular file is read.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from pathlib import Path

import torch

from hookviz.advice import advice
from hookviz.data.deferred import PENDING
from hookviz.data.run import Run
from hookviz.errors import FileFormatError, HookvizError
from hookviz.files import fields, paths, schema
from hookviz.watching import autosave
from hookviz.watching.gather import RankHistory
from hookviz.watching.watch import Watch

FORMAT = "hookviz"
VERSION = schema.VERSION
READABLE = schema.READABLE
SUFFIX = ".hookviz"
# safetensors refuses headers above 100 MB (its MAX_HEADER_SIZE); so does this reader.
_MAX_HEADER = 100_000_000
_STRUCTURE = "hookviz.json"
_NOT_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# The sparse COO tensors that one file's references make may take at most this many times the file's
# bytes: a float32 matrix with no zero takes 5 times its dense bytes as a sparse COO tensor (two
# int64 indices and its value per element), a 3-D bfloat16 one 13 times.
SPARSE_EXPANSION = 16


def _loaded_transform(source: str):
    """An edit's transform as loaded: it raises when called; ``recorded_source`` keeps the edit's text
    (checked by :func:`hookviz.edits.edit.check_source`) for ``edits_as_code``."""

    def transform(grad):
        raise HookvizError(
            f"the edit {source!r} was loaded from a file: it is a record of what ran, not code; "
            f"to run it again, add it to a Session with {advice('add_edit')}"
        )

    transform.recorded_source = source
    return transform


# ---------------------------------------------------------------------------- writing


class _Encoder:
    """Turns records into JSON-safe values against the schema, moving every tensor into ``self.tensors``."""

    def __init__(self, types: fields.Schema):
        self.types = types
        self.tensors: dict[str, torch.Tensor] = {}

    def tensor(self, tensor: torch.Tensor) -> dict:
        key = f"t{len(self.tensors)}"
        entry: dict = {"__tensor__": key, "device": str(tensor.device)}
        tensor = tensor.detach()
        if tensor.layout == torch.sparse_coo:
            entry["layout"] = "sparse_coo"
            tensor = tensor.to_dense()
        elif tensor.layout != torch.strided:
            raise HookvizError(
                f"cannot save a tensor with layout {tensor.layout}: only dense and sparse COO tensors"
            )
        # safetensors wants contiguous CPU tensors that share no memory with each other
        self.tensors[key] = tensor.to("cpu").contiguous().clone()
        return entry

    def __call__(self, value, kind: tuple, where: str):
        tag = kind[0]
        if value is PENDING:  # a lazy module call's pending field: None in the file (format 3)
            value = None
        if tag == "union":
            for alternative in kind[1]:
                if fields.fits(value, alternative, self.types.classes):
                    return self(value, alternative, where)
        elif fields.fits(value, kind, self.types.classes):
            if tag in ("int", "count", "float", "fraction"):
                problem = fields.out_of_bounds(value, kind)
                if problem:
                    raise HookvizError(f"cannot save {where}: it {problem}")
            if tag in ("none", "str", "source", "identifier", "bool", "int", "count"):
                return value
            if tag in ("float", "fraction"):
                return value if math.isfinite(value) else {"__float__": repr(float(value))}
            if tag == "tensor":
                return self.tensor(value)
            if tag == "sequence":
                items = [self(v, kind[1], f"{where}[{i}]") for i, v in enumerate(value)]
                return {"__tuple__": items} if isinstance(value, tuple) else items
            if tag == "fixed" and len(value) == len(kind[1]):
                items = [self(v, k, f"{where}[{i}]") for i, (v, k) in enumerate(zip(value, kind[1]))]
                return {"__tuple__": items} if isinstance(value, tuple) else items
            if tag == "dict" and all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self(v, kind[1], f"{where}[{k!r}]") for k, v in value.items()}}
            if tag == "record":
                return self.record(value, kind[1], where)
        raise HookvizError(
            f"cannot save {where}: it holds a {type(value).__module__}.{type(value).__name__}, where the "
            f"file format (hookviz/files/schema.py) has {fields.describe(kind)}; keep tensors, plain values "
            "and hookviz records in it"
        )

    def record(self, value, name: str, where: str) -> dict:
        kinds = self.types.fields[name]
        if any(name in table for table in (self.types.shapes, self.types.not_empty, self.types.pending_only)):
            wrong = fields.record_problem(self.types, name, {f: getattr(value, f) for f in kinds})
            if wrong:
                raise HookvizError(f"cannot save {where}.{wrong[0]}: it {wrong[1]}")
        return {
            "__type__": name,
            "fields": {f: self(getattr(value, f), t, f"{where}.{f}") for f, t in kinds.items()},
        }


def save(obj: Run | Watch | RankHistory, path: str | os.PathLike, *, run: Run | None = None) -> Path:
    """Write a run or a watch to ``path``, as ``torch.save`` writes an object, but never with pickle
    (see the module docstring); :func:`load` opens it.

    Args:
        obj: a :class:`hookviz.Run`; a :class:`hookviz.Watch` (its gathered history after
            ``Watch.gather``, on ``dst``, else this process's: :meth:`hookviz.Watch.rank_history`);
            or a :class:`hookviz.watching.gather.RankHistory`.
        path: the file to write; ``.hookviz`` is appended when it has another suffix or none.
        run: with a watch or a history only: a :class:`hookviz.Run` of the same model to keep with
            it, so that ``hookviz.show(hookviz.load(path))`` draws the norms on its graph.

    Returns:
        the path written. Tensors are stored as they are (dtype and shape kept, moved to CPU);
        their device is noted and shown, but :func:`load` gives CPU tensors.

    Raises:
        HookvizError: ``obj`` is neither, ``run`` is not a Run (or is given with a Run), or ``obj``
            holds something the file format does not list (:mod:`hookviz.files.schema`), such as a
            custom object, or a value out of its bounds.
        WatchError: ``obj`` is a watch that recorded no step.
        PathError (a HookvizError and an OSError): ``path`` is not a str or a path, or names no
            file: it is empty, ends with a separator, is ``.``, ``..`` or a folder (before or after
            the suffix), or its folder does not exist (:func:`hookviz.files.paths.target`).
        OSError: the file cannot be written (the folder is not writable, the disk is full);
            nothing is left behind.
    """
    if run is not None and not isinstance(obj, (Watch, RankHistory)):
        raise HookvizError(
            f"save(..., run=...) keeps a run with a watch or a watch history, not with a "
            f"{type(obj).__name__}: save the run on its own, {advice('save_run')}"
        )
    if run is not None and not isinstance(run, Run):
        raise HookvizError(
            f"save(..., run={type(run).__name__}): run= keeps a hookviz.Run of the same model with a watch, "
            f"e.g. {advice('save_watch_with_run')}"
        )
    if isinstance(obj, Watch):
        obj = obj.rank_history(run)
    elif run is not None:
        obj = dataclasses.replace(obj, run=run)
    types = fields.compiled(str(VERSION))
    kinds = {types.classes[name]: kind for kind, name in schema.KINDS.items()}
    kind = kinds.get(type(obj))
    if kind is None:
        raise HookvizError(
            f"save() takes a hookviz.Run, a hookviz.Watch or a watch history, got {type(obj).__name__}"
        )
    import safetensors.torch

    path = paths.target(path, SUFFIX)
    encoder = _Encoder(types)
    structure = encoder(obj, ("record", schema.KINDS[kind]), kind)
    text = json.dumps(structure, separators=(",", ":"), allow_nan=False).encode("utf-8")
    tensors = {**encoder.tensors, _STRUCTURE: torch.frombuffer(bytearray(text), dtype=torch.uint8)}
    data = safetensors.torch.save(tensors, metadata={"format": FORMAT, "version": str(VERSION), "kind": kind})
    paths.write_new(path, data)
    return path


# ---------------------------------------------------------------------------- reading
def _refuse(path: Path, problem: str) -> FileFormatError:
    return FileFormatError(f"cannot open {str(path)!r}: {problem}")


def _looks_pickled(data: bytes) -> bool:
    """A pickle (protocol 2 and up: ``0x80 <protocol>``) or a ``torch.save`` zip (``PK\\x03\\x04``),
    and not a safetensors file whose header length happens to start with byte 0x80 (its JSON
    header then starts at byte 8)."""
    if data[8:10] == b'{"':
        return False
    return (data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")) or data[
        :4
    ] == b"PK\x03\x04"


def _json(text: bytes, what: str):
    """``text`` parsed as JSON; ValueError naming ``what`` when it is not JSON or nests too deeply."""
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{what} is not JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{what} nests deeper than Python's recursion limit") from None


def _data_size(header: dict) -> int:
    """The bytes of tensor data the safetensors header says follow it; ValueError when the header does
    not describe tensors (https://huggingface.co/docs/safetensors: dtype, shape, data_offsets)."""
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]
            and isinstance(shape, list)
            and all(type(n) is int and n >= 0 for n in shape)
            and isinstance(entry.get("dtype"), str)
        ):
            raise ValueError(f"its header's entry for tensor {name[:80]!r} is not dtype, shape, data_offsets")
        end = max(end, offsets[1])
    return end


def _read(path: Path) -> tuple[dict, bytes]:
    """The checked safetensors header of the file at ``path`` and the file's bytes.

    Reads the first 10 bytes, then the header (at most its stated length, at most 100 MB), checks it
    is a hookviz header of a readable version, and only then reads the data, exactly as many bytes as
    the header's tensors span. Raises FileFormatError naming the problem; FileNotFoundError; PathError
    when ``path`` is not a regular file (:func:`hookviz.files.paths.open_regular`).
    """
    with paths.open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        start = file.read(10)
        if _looks_pickled(start):
            raise _refuse(
                path,
                (
                    "it is a pickle (torch.save / pickle.dump) file, not a hookviz file. hookviz never "
                    "unpickles, because unpickling a file can run any code in it; save runs and watch "
                    f"histories with {advice('save_run')} or {advice('save_watch')} and open those"
                ),
            )
        if len(start) < 8:
            raise _refuse(
                path,
                f"the file is truncated ({size} bytes; a hookviz file starts with an 8-byte header length)",
            )
        (length,) = struct.unpack("<Q", start[:8])
        if length > _MAX_HEADER or start[8:9] not in (b"{", b""):
            raise _refuse(path, "it is not a hookviz file (it does not start with a safetensors header)")
        if 8 + length > size:
            raise _refuse(
                path, f"the file is truncated: its header says {length} bytes follow, but only {size - 8} do"
            )
        file.seek(8)
        try:
            header = _json(file.read(length), "its header")
        except ValueError as error:
            raise _refuse(path, f"it is not a hookviz file, or it is corrupt: {error}") from None
        metadata = header.get("__metadata__") if isinstance(header, dict) else None
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise _refuse(path, "it is a safetensors file but not one hookviz wrote (no hookviz metadata)")
        version = metadata.get("version")
        if version not in READABLE:
            raise _refuse(
                path,
                (
                    f"it has format version {str(version)[:20]!r}, and this hookviz reads versions "
                    f"{', '.join(READABLE)}; open it with the hookviz version that wrote it, or upgrade "
                    "hookviz (pip install -U hookviz)"
                ),
            )
        if metadata.get("kind") not in schema.KINDS:
            raise _refuse(
                path,
                f"unknown kind {str(metadata.get('kind'))[:20]!r} (expected 'run' or 'watch'); "
                "the file is corrupt",
            )
        try:
            data_size = _data_size(header)
        except ValueError as error:
            raise _refuse(path, f"the file is corrupt: {error}") from None
        if 8 + length + data_size != size:
            problem = "truncated" if 8 + length + data_size > size else "longer than its header says"
            raise _refuse(
                path,
                f"the file is corrupt or {problem}: its header says {data_size} bytes of tensors follow it, "
                f"but {size - 8 - length} do",
            )
        file.seek(0)
        return header, file.read(size)


def load(path: str | os.PathLike) -> Run | RankHistory:
    """Open a file written by :func:`save` (a run, a watch or a watch history).

    Args:
        path: the ``.hookviz`` file.

    Returns:
        a :class:`hookviz.Run` (``run.model`` is None: the model is not in the file; edits are
        records whose transform raises when called) or a :class:`hookviz.watching.gather.RankHistory`.
        Every tensor comes back on CPU, equal (``torch.equal``) to the one saved.

    Raises:
        FileFormatError: (a HookvizError) naming the file and the problem: a pickle /
            ``torch.save`` file (refused, never unpickled), a file that is not a hookviz file
            (refused after reading its header, whatever its size), a truncated or corrupt file, a
            value whose type is not the one :mod:`hookviz.files.schema` gives it or that is out of
            its bounds (a number too large for an int64 or a float64, a negative count, a loss that
            is not 0-dim: the place is named, ``run.nodes['x'].order``), an unknown record type or
            field, an edit whose text is not an expression, sparse tensors that would take more
            than :data:`SPARSE_EXPANSION` times the file's size, a version this hookviz does not
            read.
        FileNotFoundError: no such file.
        PathError: (a HookvizError and an OSError) ``path`` is not a str or a path, or is a
            folder, a FIFO, a socket or a device; it is refused before it is opened, and never
            blocks.
    """
    import safetensors
    import safetensors.torch

    path = paths.as_path(path)
    header, data = _read(path)
    metadata = header["__metadata__"]
    try:
        tensors = safetensors.torch.load(data)
    except (safetensors.SafetensorError, ValueError, RuntimeError, TypeError) as error:
        raise _refuse(path, f"the file is corrupt or truncated: safetensors says {error}") from None
    if _STRUCTURE not in tensors or tensors[_STRUCTURE].dtype != torch.uint8:
        raise _refuse(path, f"the file is corrupt: it has no uint8 tensor {_STRUCTURE!r}")
    try:
        structure = _json(tensors.pop(_STRUCTURE).numpy().tobytes(), "its structure")
        top = schema.KINDS[metadata["kind"]]
        decoder = _Decoder(tensors, fields.compiled(metadata["version"]), SPARSE_EXPANSION * len(data))
        return decoder(structure, ("record", top), metadata["kind"])
    except ValueError as error:
        raise _refuse(path, f"the file is corrupt: {error}") from None


class _Decoder:
    """The inverse of :class:`_Encoder`: builds the schema's records and nothing else.

    Every problem is a ValueError naming where in the object it is (``run.nodes['x'].output``).

    Args:
        tensors: the file's tensors by name.
        types: the schema of the file's version.
        sparse_budget: bytes the sparse COO tensors made for the file's references may take in all.
    """

    def __init__(self, tensors: dict[str, torch.Tensor], types: fields.Schema, sparse_budget: int):
        self.tensors, self.types = tensors, types
        self.sparse: dict[str, torch.Tensor] = {}  # by stored tensor: each is made sparse once
        self.sparse_budget = sparse_budget

    def __call__(self, value, kind: tuple, where: str):
        tag = kind[0]
        if tag == "union":
            for alternative in kind[1]:
                if fields.stored_fits(value, alternative):
                    return self(value, alternative, where)
        elif fields.stored_fits(value, kind):
            if tag in ("none", "str", "bool"):
                return value
            if tag == "source":
                return self.source(value, where)
            if tag == "identifier" and value.isidentifier() and value.isascii():
                return value
            if tag in ("int", "count", "float", "fraction"):
                return self.number(value, kind, where)
            if tag == "tensor":
                return self.tensor(value, where)
            if tag in ("sequence", "fixed"):
                return self.sequence(value, kind, where)
            if tag == "dict" and isinstance(value["__dict__"], dict):
                return {k: self(v, kind[1], f"{where}[{k[:80]!r}]") for k, v in value["__dict__"].items()}
            if tag == "record":
                return self.record(value, kind[1], where)
            if tag == "graph":
                return self.graph_edges(value["__graph__"], where)
        raise ValueError(f"{where} should be {fields.describe(kind)}, but the file has {_shown(value)}")

    def number(self, value, kind: tuple, where: str) -> int | float:
        if isinstance(value, dict):  # a float's {"__float__": "nan"}
            value = _NOT_FINITE.get(value["__float__"]) if isinstance(value["__float__"], str) else None
            if value is None:
                raise ValueError(f"{where} should be {fields.describe(kind)}, but the file has an object")
        problem = fields.out_of_bounds(value, kind)
        if problem:
            raise ValueError(f"{where} {problem}")
        return value

    def source(self, value: str, where: str) -> str:
        from hookviz.edits.edit import check_source

        try:
            check_source(value)
        except HookvizError as error:
            raise ValueError(f"{where}: {error}") from None
        return value

    def tensor(self, value: dict, where: str) -> torch.Tensor:
        tensor = self.tensors.get(value["__tensor__"]) if isinstance(value["__tensor__"], str) else None
        if tensor is None:
            raise ValueError(f"{where} names tensor {str(value['__tensor__'])[:40]!r}, which the file lacks")
        if value.get("layout") == "sparse_coo":
            return self.sparse_tensor(value["__tensor__"], tensor, where)
        if value.get("layout") is not None:
            raise ValueError(f"{where} has an unknown tensor layout {str(value['layout'])[:40]!r}")
        return tensor

    def sparse_tensor(self, key: str, dense: torch.Tensor, where: str) -> torch.Tensor:
        """The stored tensor ``key`` as a sparse COO tensor, made once whatever references it, within
        the budget (a COO tensor keeps an int64 index per dimension and its value per element)."""
        if key not in self.sparse:
            size = int(torch.count_nonzero(dense)) * (8 * dense.dim() + dense.element_size())
            if size > self.sparse_budget:
                raise ValueError(
                    f"{where} asks for tensor {key[:40]!r} as a sparse COO tensor, which would take "
                    f"{size} bytes: the file's sparse tensors may take {SPARSE_EXPANSION} times the file's "
                    "size; hookviz never writes such a file"
                )
            self.sparse_budget -= size
            self.sparse[key] = dense.to_sparse()
        return self.sparse[key]

    def sequence(self, value, kind: tuple, where: str):
        items = value if isinstance(value, list) else value["__tuple__"]
        if not isinstance(items, list):
            raise ValueError(f"{where} should be a sequence, but the file has {_shown(items)}")
        if kind[0] == "sequence":
            decoded = [self(v, kind[1], f"{where}[{i}]") for i, v in enumerate(items)]
        elif len(items) == len(kind[1]):
            decoded = [self(v, k, f"{where}[{i}]") for i, (v, k) in enumerate(zip(items, kind[1]))]
        else:
            raise ValueError(f"{where} should have {len(kind[1])} items, but the file has {len(items)}")
        return decoded if isinstance(value, list) else tuple(decoded)

    def record(self, value: dict, name: str, where: str):
        kinds = self.types.fields[name]
        stored = value.get("fields")
        if not isinstance(stored, dict):
            raise ValueError(f"{where} is a {name} without fields")
        unknown = sorted(set(stored) - set(kinds))
        if unknown:
            raise ValueError(f"{where} is a {name} with unknown fields {[u[:40] for u in unknown[:5]]}")
        missing = [f for f in kinds if f not in stored]
        if missing:
            raise ValueError(f"{where} is a {name} without the fields {missing[:5]}")
        arguments = {f: self(stored[f], kind, f"{where}.{f}") for f, kind in kinds.items()}
        wrong = fields.record_problem(self.types, name, arguments)
        if wrong:
            raise ValueError(f"{where}.{wrong[0]} {wrong[1]}")
        if "graph" in arguments:  # version 1 kept the networkx graph; a Run derives it from its edges
            arguments["edges"] = arguments.pop("graph")
        if name == "Edit":
            arguments["transform"] = _loaded_transform(arguments["source"])
        return self.types.classes[name](**arguments)

    def graph_edges(self, graph, where: str) -> list[tuple[str, str, int]]:
        """Version 1's networkx graph as the edges (producer, consumer, slot) a Run keeps."""
        edges = graph.get("edges") if isinstance(graph, dict) else None
        if not isinstance(edges, list):
            raise ValueError(f"{where} is a graph without a list of edges")
        out = []
        for i, edge in enumerate(edges):
            if not (
                isinstance(edge, list)
                and len(edge) == 3
                and isinstance(edge[0], str)
                and isinstance(edge[1], str)
                and isinstance(edge[2], dict)
                and isinstance(edge[2].get("__dict__"), dict)
                and type(edge[2]["__dict__"].get("slot")) is int
            ):
                raise ValueError(f"{where}'s edge {i} is not [producer, consumer, {{slot: int}}]")
            problem = fields.out_of_bounds(edge[2]["__dict__"]["slot"], ("count",))
            if problem:
                raise ValueError(f"{where}'s edge {i} has a slot that {problem}")
            out.append((edge[0], edge[1], edge[2]["__dict__"]["slot"]))
        return out


def _shown(value) -> str:
    """A short description of a value read from a file's JSON, for messages."""
    if isinstance(value, dict):
        return f"an object with keys {[str(k)[:40] for k in list(value)[:5]]}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"{type(value).__name__} {str(value)[:40]!r}"


def _autosave_target(path) -> Path:
    return paths.target(path, SUFFIX, "train.hookviz")


# hookviz.watch(model, path=...) writes with save (the watching layer comes before this one).
autosave.write_with(_autosave_target, save)
