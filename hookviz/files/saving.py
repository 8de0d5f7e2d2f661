"""Save a run or a watch history to one file and open it later, on any machine, without unpickling.

A hookviz file (suffix ``.hookviz``) is a plain safetensors file
(https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON header, then
the raw bytes of every tensor. Every tensor the object holds (leaf gradients, kept gradient values,
watch statistics) is one safetensors tensor, named ``t0``, ``t1``, ...; the structure around them
(records, names, numbers) is UTF-8 JSON, stored as the uint8 tensor ``hookviz.json`` (a big graph's
JSON outgrows the 100 MB that safetensors allows its header). The header's ``__metadata__`` says
``"format": "hookviz"``, ``"version"`` and ``"kind"`` (``"run"`` or ``"watch"``).

What the structure may hold is :mod:`hookviz.files.schema`: records are written and read field by
field against it, and a file is refused unless every value has the type the schema gives it. Reading
parses that JSON and hands the tensor bytes to safetensors, which only copies bytes into tensors:
nothing in a file can run code, so a file from someone else is safe to open. A ``torch.save`` /
pickle file, or any file without a hookviz header, is refused after reading its first bytes.

Writing goes to a new temporary file in the target's folder, created exclusively (``O_CREAT |
O_EXCL | O_NOFOLLOW``, a random name), then renamed over the target (``os.replace``): a crash leaves
the old file, a failure removes the temporary, and no symlink is ever written through. A symlink at
the target itself is replaced by the new file; the file it pointed to is left as it was.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import math
import os
import secrets
import struct
from pathlib import Path

import torch

from hookviz.data.deferred import PENDING
from hookviz.errors import HookvizError
from hookviz.files import schema
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


class FileFormatError(HookvizError):
    """A file is not a hookviz file, is a pickle, is truncated or corrupt, or has an unknown version."""


def _loaded_transform(source: str):
    """An edit's transform as loaded: it raises when called; ``recorded_source`` keeps the edit's text
    (checked by :func:`hookviz.edits.edit.check_source`) for ``edits_as_code``."""

    def transform(grad):
        raise HookvizError(
            f"the edit {source!r} was loaded from a file: it is a record of what ran, not code; "
            "to run it again, add it to a Session with session.edit(target, slot, transform)"
        )

    transform.recorded_source = source
    return transform


# ---------------------------------------------------------------------------- the schema's types


def _compile(node: ast.AST) -> tuple:
    """A field type of :mod:`~hookviz.files.schema` (parsed annotation) as a nested tuple."""
    match node:
        case ast.BinOp(op=ast.BitOr()):
            return ("union", _alternatives(node))
        case ast.Constant(value=None):
            return ("none",)
        case ast.Attribute(value=ast.Name(id="torch"), attr="Tensor"):
            return ("tensor",)
        case ast.Name(id=name) if name in ("str", "int", "float", "bool"):
            return (name,)
        case ast.Name(id="EditSource"):
            return ("source",)
        case ast.Name(id="Identifier"):
            return ("identifier",)
        case ast.Name(id="Graph"):
            return ("graph",)
        case ast.Name(id=name):
            return ("record", name)
        case ast.Subscript(
            value=ast.Name(id="tuple"), slice=ast.Tuple(elts=[item, ast.Constant(value=dots)])
        ) if dots is Ellipsis:
            return ("sequence", _compile(item))
        case ast.Subscript(value=ast.Name(id="tuple"), slice=ast.Tuple(elts=items)):
            return ("fixed", tuple(_compile(item) for item in items))
        case ast.Subscript(value=ast.Name(id="list"), slice=item):
            return ("sequence", _compile(item))
        case ast.Subscript(value=ast.Name(id="dict"), slice=ast.Tuple(elts=[ast.Name(id="str"), item])):
            return ("dict", _compile(item))
    raise ValueError(f"hookviz.files.schema: unknown field type {ast.unparse(node)!r}")


def _alternatives(node: ast.AST) -> tuple:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _alternatives(node.left) + _alternatives(node.right)
    return (_compile(node),)


class _Schema:
    """The record classes and compiled field types of one file-format version."""

    def __init__(self, version: str):
        self.version = version
        self.classes: dict[str, type] = {}
        self.fields: dict[str, dict[str, tuple]] = {}
        for name, (module, fields) in schema.records(version).items():
            self.classes[name] = getattr(importlib.import_module(module), name)
            self.fields[name] = {
                field: _compile(ast.parse(kind, mode="eval").body) for field, kind in fields.items()
            }
        named = {n for kinds in self.fields.values() for kind in kinds.values() for n in _records_in(kind)}
        unlisted = sorted(named - set(self.classes))
        if unlisted:
            raise ValueError(f"hookviz.files.schema names record types it does not list: {unlisted}")


def _records_in(kind: tuple):
    """The record type names a compiled type refers to."""
    if kind[0] == "record":
        yield kind[1]
    elif kind[0] in ("union", "fixed"):
        for alternative in kind[1]:
            yield from _records_in(alternative)
    elif kind[0] in ("sequence", "dict"):
        yield from _records_in(kind[1])


_SCHEMAS: dict[str, _Schema] = {}


def _schema(version: str) -> _Schema:
    if version not in _SCHEMAS:
        _SCHEMAS[version] = _Schema(version)
    return _SCHEMAS[version]


def _describe(kind: tuple) -> str:
    """A compiled type back in the schema's notation, for messages."""
    tag = kind[0]
    if tag == "union":
        return " | ".join(_describe(k) for k in kind[1])
    if tag == "sequence":
        return f"a sequence of {_describe(kind[1])}"
    if tag == "fixed":
        return f"tuple[{', '.join(_describe(k) for k in kind[1])}]"
    if tag == "dict":
        return f"dict[str, {_describe(kind[1])}]"
    if tag == "record":
        return kind[1]
    words = {"none": "None", "tensor": "torch.Tensor", "source": "an edit expression"}
    return words.get(tag, "a Python identifier" if tag == "identifier" else tag)


# The Python types of a live value, and of a value read from JSON, of each sort of schema type; a
# sort stored as a JSON object is told by its marker key (a record's by its "__type__").
_LIVE_TYPES = {
    "none": (type(None),),
    "str": (str,),
    "source": (str,),
    "identifier": (str,),
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "tensor": (torch.Tensor,),
    "sequence": (tuple, list),
    "fixed": (tuple, list),
    "dict": (dict,),
}
_STORED_TYPES = {**_LIVE_TYPES, "tensor": (), "sequence": (list,), "fixed": (list,), "dict": ()}
_MARKERS = {
    "float": "__float__",
    "tensor": "__tensor__",
    "sequence": "__tuple__",
    "fixed": "__tuple__",
    "dict": "__dict__",
    "graph": "__graph__",
}


def _fits(value, kind: tuple, classes: dict[str, type]) -> bool:
    """Whether a live value is of the (non-union) schema type's sort: picks a union's alternative."""
    if kind[0] == "record":
        return type(value) is classes[kind[1]]
    if isinstance(value, bool) and kind[0] != "bool":
        return False
    return isinstance(value, _LIVE_TYPES.get(kind[0], ()))


def _stored_fits(value, kind: tuple) -> bool:
    """Whether a value read from a file's JSON is of the (non-union) schema type's sort."""
    if isinstance(value, dict):
        if kind[0] == "record":
            return value.get("__type__") == kind[1]
        return _MARKERS.get(kind[0]) in value
    return type(value) in _STORED_TYPES.get(kind[0], ())


# ---------------------------------------------------------------------------- writing


class _Encoder:
    """Turns records into JSON-safe values against the schema, moving every tensor into ``self.tensors``."""

    def __init__(self, types: _Schema):
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
                if _fits(value, alternative, self.types.classes):
                    return self(value, alternative, where)
        elif _fits(value, kind, self.types.classes):
            if tag in ("none", "str", "source", "identifier", "bool", "int"):
                return value
            if tag == "float":
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
                fields = self.types.fields[kind[1]]
                return {
                    "__type__": kind[1],
                    "fields": {f: self(getattr(value, f), t, f"{where}.{f}") for f, t in fields.items()},
                }
        raise HookvizError(
            f"cannot save {where}: it holds a {type(value).__module__}.{type(value).__name__}, where the "
            f"file format (hookviz/files/schema.py) has {_describe(kind)}; keep tensors, plain values and "
            "hookviz records in it"
        )


def _write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary created exclusively beside it (see the module
    docstring); the temporary is removed whatever fails."""
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.partial")
        try:
            descriptor = os.open(
                temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666
            )
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"cannot create a temporary file beside {str(path)!r}: every name tried exists")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)  # a crash mid-write leaves the old file, never half a new one
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def save(obj, path: str | Path, *, run=None) -> Path:
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
        HookvizError: ``obj`` is neither, or holds something the file format does not list
            (:mod:`hookviz.files.schema`), such as a custom object.
        OSError: the file cannot be written (the target is a directory, the folder is not
            writable, the disk is full); nothing is left behind.
    """
    if isinstance(obj, Watch):
        obj = obj.rank_history(run)
    elif run is not None:
        if not isinstance(obj, RankHistory):
            raise HookvizError(
                f"save(..., run=...) keeps a run with a watch or a watch history, not with a "
                f"{type(obj).__name__}: save the run on its own, hookviz.save(run, path)"
            )
        obj = dataclasses.replace(obj, run=run)
    types = _schema(str(VERSION))
    kinds = {types.classes[name]: kind for kind, name in schema.KINDS.items()}
    kind = kinds.get(type(obj))
    if kind is None:
        raise HookvizError(
            f"save() takes a hookviz.Run, a hookviz.Watch or a watch history, got {type(obj).__name__}"
        )
    import safetensors.torch

    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    encoder = _Encoder(types)
    structure = encoder(obj, ("record", schema.KINDS[kind]), kind)
    text = json.dumps(structure, separators=(",", ":"), allow_nan=False).encode("utf-8")
    tensors = {**encoder.tensors, _STRUCTURE: torch.frombuffer(bytearray(text), dtype=torch.uint8)}
    data = safetensors.torch.save(tensors, metadata={"format": FORMAT, "version": str(VERSION), "kind": kind})
    _write_new(path, data)
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
    the header's tensors span. Raises FileFormatError naming the problem, FileNotFoundError.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        start = file.read(10)
        if _looks_pickled(start):
            raise _refuse(
                path,
                (
                    "it is a pickle (torch.save / pickle.dump) file, not a hookviz file. hookviz never "
                    "unpickles, because unpickling a file can run any code in it; save runs and watch "
                    "histories with hookviz.save(run_or_watch, path) and open those"
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


def load(path: str | Path):
    """Open a file written by :func:`save` (a run, a watch or a watch history).

    Args:
        path: the ``.hookviz`` file.

    Returns:
        a :class:`hookviz.Run` (``run.model`` is None: the model is not in the file; edits are
        records whose transform raises when called) or a :class:`hookviz.watching.gather.RankHistory`.
        Every tensor comes back on CPU, equal (``torch.equal``) to the one saved.

    Raises:
        FileFormatError (a HookvizError), naming the file and the problem: a pickle /
        ``torch.save`` file (refused, never unpickled), a file that is not a hookviz file (refused
        after reading its header, whatever its size), a truncated or corrupt file, a value whose type
        is not the one :mod:`hookviz.files.schema` gives it, an unknown record type or field, an edit
        whose text is not an expression, a version this hookviz does not read.
        FileNotFoundError: no such file.
    """
    import safetensors
    import safetensors.torch

    path = Path(path)
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
        return _Decoder(tensors, _schema(metadata["version"]))(structure, ("record", top), metadata["kind"])
    except ValueError as error:
        raise _refuse(path, f"the file is corrupt: {error}") from None


class _Decoder:
    """The inverse of :class:`_Encoder`: builds the schema's records and nothing else.

    Every problem is a ValueError naming where in the object it is (``run.nodes['x'].output``).
    """

    def __init__(self, tensors: dict[str, torch.Tensor], types: _Schema):
        self.tensors, self.types = tensors, types

    def __call__(self, value, kind: tuple, where: str):
        tag = kind[0]
        if tag == "union":
            for alternative in kind[1]:
                if _stored_fits(value, alternative):
                    return self(value, alternative, where)
        elif _stored_fits(value, kind):
            if tag in ("none", "str", "bool", "int"):
                return value
            if tag == "source":
                return self.source(value, where)
            if tag == "identifier" and value.isidentifier() and value.isascii():
                return value
            if tag == "float":
                if not isinstance(value, dict):
                    return value
                if value.get("__float__") in _NOT_FINITE:
                    return _NOT_FINITE[value["__float__"]]
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
        raise ValueError(f"{where} should be {_describe(kind)}, but the file has {_shown(value)}")

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
            return tensor.to_sparse()
        if value.get("layout") is not None:
            raise ValueError(f"{where} has an unknown tensor layout {str(value['layout'])[:40]!r}")
        return tensor

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
        fields = self.types.fields[name]
        stored = value.get("fields")
        if not isinstance(stored, dict):
            raise ValueError(f"{where} is a {name} without fields")
        unknown = sorted(set(stored) - set(fields))
        if unknown:
            raise ValueError(f"{where} is a {name} with unknown fields {[u[:40] for u in unknown[:5]]}")
        missing = [f for f in fields if f not in stored]
        if missing:
            raise ValueError(f"{where} is a {name} without the fields {missing[:5]}")
        arguments = {f: self(stored[f], kind, f"{where}.{f}") for f, kind in fields.items()}
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
            out.append((edge[0], edge[1], edge[2]["__dict__"]["slot"]))
        return out


def _shown(value) -> str:
    """A short description of a value read from a file's JSON, for messages."""
    if isinstance(value, dict):
        return f"an object with keys {[str(k)[:40] for k in list(value)[:5]]}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"{type(value).__name__} {str(value)[:40]!r}"
