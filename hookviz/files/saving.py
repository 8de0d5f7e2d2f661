"""Save a run or a watch history to one file and open it later, on any machine, without unpickling.

A hookviz file (suffix ``.hookviz``) is a plain safetensors file
(https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON header, then
the raw bytes of every tensor. Every tensor the object holds (leaf gradients, kept gradient values,
watch statistics) is one safetensors tensor, named ``t0``, ``t1``, ...; the structure around them
(records, names, the graph, numbers) is UTF-8 JSON, stored as the uint8 tensor ``hookviz.json`` (a
big graph's JSON outgrows the 100 MB that safetensors allows its header). The header's
``__metadata__`` says ``"format": "hookviz"``, ``"version"`` and ``"kind"`` (``"run"`` or ``"watch"``).

Reading parses that JSON and hands the tensor bytes to safetensors, which only copies bytes into
tensors: nothing in a file can run code, so a file from someone else is safe to open. Records are
rebuilt only from hookviz's own dataclasses, which their modules register here with
:func:`record_types` (this module imports none of them), never from a class named in the file.
A ``torch.save`` / pickle file is refused before anything is read from it.

Version history: 1 = the first format.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from pathlib import Path

import networkx as nx
import torch

from hookviz.errors import HookvizError

FORMAT = "hookviz"
VERSION = 2  # 2: a Run keeps its graph's edges (version 1 kept the networkx graph; still read)
READABLE = ("1", "2")
SUFFIX = ".hookviz"
# safetensors refuses headers above 100 MB (its MAX_HEADER_SIZE); so does this reader.
_MAX_HEADER = 100_000_000
_STRUCTURE = "hookviz.json"


class FileFormatError(HookvizError):
    """A file is not a hookviz file, is a pickle, is truncated or corrupt, or has an unknown version."""


# Fields that are not data: a weak reference to the user's live model, an edit's Python callable.
_SKIPPED = {"Run": {"model_ref", "details"}, "Edit": {"transform"}}


_RECORD_TYPES: dict[str, type] = {}
_FILE_KINDS: dict[type, str] = {}  # the objects a file holds at its top, and the kind it says


def record_types(*types: type, kind: str | None = None) -> None:
    """Register hookviz dataclasses that a file may hold (called by the modules that define them).

    Args:
        types: dataclasses, rebuilt by name when a file is read.
        kind: for the one type a whole file holds (``"run"``, ``"watch"``), the kind it says.
    """
    for cls in types:
        _RECORD_TYPES[cls.__name__] = cls
        if kind is not None:
            _FILE_KINDS[cls] = kind


def _record_types() -> dict[str, type]:
    """The dataclasses a file may hold, by class name: hookviz's records and nothing else."""
    return dict(_RECORD_TYPES)


def _loaded_transform(source: str):
    def transform(grad):
        raise HookvizError(
            f"the edit {source!r} was loaded from a file: it is a record of what ran, not code; "
            "to run it again, add it to a Session with session.edit(target, slot, transform)"
        )

    return transform


# ---------------------------------------------------------------------------- writing


class _Encoder:
    """Turns records into JSON-safe values, moving every tensor into ``self.tensors``."""

    def __init__(self, types: dict[str, type]):
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

    def __call__(self, value, where: str = "object"):
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if isinstance(value, tuple):
            return {"__tuple__": [self(v, where) for v in value]}
        if isinstance(value, list):
            return [self(v, where) for v in value]
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value):
                return {"__dict__": {k: self(v, f"{where}[{k!r}]") for k, v in value.items()}}
            return {"__items__": [[self(k, where), self(v, where)] for k, v in value.items()]}
        if isinstance(value, nx.DiGraph):
            return {
                "__graph__": {
                    "attributes": self(dict(value.graph), where),
                    "nodes": [[self(n, where), self(dict(a), where)] for n, a in value.nodes(data=True)],
                    "edges": [
                        [self(u, where), self(v, where), self(dict(a), where)]
                        for u, v, a in value.edges(data=True)
                    ],
                }
            }
        name = type(value).__name__
        if dataclasses.is_dataclass(value) and self.types.get(name) is type(value):
            skipped = _SKIPPED.get(name, set())
            return {
                "__type__": name,
                "fields": {
                    f.name: self(getattr(value, f.name), f"{where}.{f.name}")
                    for f in dataclasses.fields(value)
                    if f.name not in skipped
                },
            }
        raise HookvizError(
            f"cannot save {where}: it holds a {type(value).__module__}.{name}, which is not a tensor, "
            "a plain value or a hookviz record"
        )


def save(obj, path: str | Path) -> Path:
    """Write a :class:`~hookviz.Run` or a watch history to ``path`` (see the module docstring).

    Args:
        obj: a :class:`hookviz.Run`, or a :class:`hookviz.watching.gather.RankHistory` (what
            ``Watch.save`` and ``Watch.gather`` produce).
        path: the file to write; ``.hookviz`` is appended when it has another suffix or none.

    Returns:
        the path written. Tensors are stored as they are (dtype and shape kept, moved to CPU);
        their device is noted and shown, but :func:`load` gives CPU tensors.

    Raises:
        HookvizError: ``obj`` is neither, or holds something that is not data (a custom object).
        OSError: the file cannot be written.
    """
    kind = _FILE_KINDS.get(type(obj))
    if kind is None:
        raise HookvizError(
            "save() takes a hookviz.Run or a watch history (Watch.save / Watch.gather), got "
            f"{type(obj).__name__}"
        )
    import safetensors.torch

    path = Path(path)
    if path.suffix != SUFFIX:
        path = path.with_name(path.name + SUFFIX)
    encoder = _Encoder(_record_types())
    structure = encoder(obj, kind)
    text = json.dumps(structure, separators=(",", ":"), allow_nan=False).encode("utf-8")
    tensors = {**encoder.tensors, _STRUCTURE: torch.frombuffer(bytearray(text), dtype=torch.uint8)}
    data = safetensors.torch.save(tensors, metadata={"format": FORMAT, "version": str(VERSION), "kind": kind})
    temporary = path.with_name(path.name + ".partial")
    temporary.write_bytes(data)
    temporary.replace(path)  # a crash mid-write leaves the old file, never half a new one
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


def _header(path: Path, data: bytes) -> dict:
    """The safetensors header of ``data``, checked; raises FileFormatError naming the problem."""
    if _looks_pickled(data):
        raise _refuse(
            path,
            (
                "it is a pickle (torch.save / pickle.dump) file, not a hookviz file. hookviz never "
                "unpickles, because unpickling a file can run any code in it; save runs and watch "
                "histories with run.save(path) / watch.save(path) and open those"
            ),
        )
    if len(data) < 8:
        raise _refuse(
            path,
            f"the file is truncated ({len(data)} bytes; a hookviz file starts with an 8-byte header length)",
        )
    (length,) = struct.unpack("<Q", data[:8])
    if length > _MAX_HEADER or data[8:9] not in (b"{", b""):
        raise _refuse(path, "it is not a hookviz file (it does not start with a safetensors header)")
    if 8 + length > len(data):
        raise _refuse(
            path, f"the file is truncated: its header says {length} bytes follow, but only {len(data) - 8} do"
        )
    try:
        header = json.loads(data[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _refuse(
            path, f"it is not a hookviz file, or it is corrupt: its header is not JSON ({error})"
        ) from None
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise _refuse(path, "it is a safetensors file but not one hookviz wrote (no hookviz metadata)")
    return header


def load(path: str | Path):
    """Open a file written by ``Run.save`` or ``Watch.save``.

    Args:
        path: the ``.hookviz`` file.

    Returns:
        a :class:`hookviz.Run` (``run.model`` is None: the model is not in the file; edits are
        records whose transform raises when called) or a :class:`hookviz.watching.gather.RankHistory`.
        Every tensor comes back on CPU, equal (``torch.equal``) to the one saved.

    Raises:
        FileFormatError (a HookvizError), naming the file and the problem: a pickle /
        ``torch.save`` file (refused, never unpickled), a file that is not a hookviz file, a
        truncated or corrupt file, a version newer than this hookviz reads.
        FileNotFoundError: no such file.
    """
    import safetensors
    import safetensors.torch

    path = Path(path)
    data = path.read_bytes()
    header = _header(path, data)
    metadata = header["__metadata__"]
    version = metadata.get("version")
    if version not in READABLE:
        raise _refuse(
            path,
            (
                f"it has format version {version!r}, and this hookviz reads versions {', '.join(READABLE)}; "
                "open it with the hookviz version that wrote it, or upgrade hookviz (pip install -U hookviz)"
            ),
        )
    kind = metadata.get("kind")
    if kind not in ("run", "watch"):
        raise _refuse(path, f"unknown kind {kind!r} (expected 'run' or 'watch'); the file is corrupt")
    try:
        tensors = safetensors.torch.load(data)
    except (safetensors.SafetensorError, ValueError, RuntimeError) as error:
        raise _refuse(path, f"the file is corrupt or truncated: safetensors says {error}") from None
    try:
        structure = json.loads(bytes(tensors.pop(_STRUCTURE).numpy()).decode("utf-8"))
        obj = _Decoder(tensors, _record_types())(structure)
    except (KeyError, TypeError, ValueError, AttributeError, UnicodeDecodeError) as error:
        raise _refuse(
            path, f"the file is corrupt: its structure does not decode ({type(error).__name__}: {error})"
        ) from None
    if _FILE_KINDS.get(type(obj)) != kind:
        raise _refuse(path, f"the file is corrupt: it says {kind!r} but holds a {type(obj).__name__}")
    return obj


class _Decoder:
    """The inverse of :class:`_Encoder`; builds only the record types it is given."""

    def __init__(self, tensors: dict[str, torch.Tensor], types: dict[str, type]):
        self.tensors, self.types = tensors, types

    def __call__(self, value):
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "__tensor__" in value:
            tensor = self.tensors[value["__tensor__"]]
            return tensor.to_sparse() if value.get("layout") == "sparse_coo" else tensor
        if "__float__" in value:
            return float(value["__float__"])
        if "__tuple__" in value:
            return tuple(self(v) for v in value["__tuple__"])
        if "__dict__" in value:
            return {k: self(v) for k, v in value["__dict__"].items()}
        if "__items__" in value:
            return {self(k): self(v) for k, v in value["__items__"]}
        if "__graph__" in value:
            data = value["__graph__"]
            graph = nx.DiGraph(**self(data["attributes"]))
            graph.add_nodes_from((self(n), self(a)) for n, a in data["nodes"])
            graph.add_edges_from((self(u), self(v), self(a)) for u, v, a in data["edges"])
            return graph
        if "__type__" in value:
            cls = self.types.get(value["__type__"])
            if cls is None:
                raise ValueError(f"unknown record type {value['__type__']!r}")
            stored = {k: self(v) for k, v in value["fields"].items()}
            known = {f.name: f for f in dataclasses.fields(cls) if f.init}
            if cls.__name__ == "Run" and "edges" not in stored and "graph" in stored:  # version 1
                stored["edges"] = [(u, v, a["slot"]) for u, v, a in stored["graph"].edges(data=True)]
            arguments = {k: v for k, v in stored.items() if k in known}
            if cls.__name__ == "Edit":
                arguments["transform"] = _loaded_transform(arguments.get("source", ""))
            return cls(**arguments)
        raise ValueError(f"unexpected JSON object with keys {sorted(value)[:5]}")
