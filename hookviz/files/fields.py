"""The field types of :mod:`hookviz.files.schema`, compiled: what a value of each may be, as a live
object (saving) and as read from a file's JSON (loading), and the bounds a number or a tensor's shape
must keep beyond its type (the schema's COUNTS, FRACTIONS, SHAPES, NOT_EMPTY and PENDING_ONLY).

A compiled type is a nested tuple whose first item is its sort: ``("int",)``, ``("count",)`` (an int
of a COUNTS field), ``("float",)``, ``("fraction",)``, ``("str",)``, ``("bool",)``, ``("none",)``,
``("tensor",)``, ``("source",)``, ``("identifier",)``, ``("graph",)``, ``("record", name)``,
``("sequence", item)``, ``("fixed", items)``, ``("dict", item)`` and ``("union", alternatives)``.
"""

from __future__ import annotations

import ast
import importlib

import torch

from hookviz.files import schema

# torch's sizes and counts are int64, and so is every int a file may hold.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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


def _narrowed(kind: tuple, sort: str, narrower: str) -> tuple:
    """``kind`` with every ``(sort,)`` in it replaced by ``(narrower,)``."""
    if kind == (sort,):
        return (narrower,)
    if kind[0] in ("union", "fixed"):
        return (kind[0], tuple(_narrowed(k, sort, narrower) for k in kind[1]))
    if kind[0] in ("sequence", "dict"):
        return (kind[0], _narrowed(kind[1], sort, narrower))
    return kind


def _records_in(kind: tuple):
    """The record type names a compiled type refers to."""
    if kind[0] == "record":
        yield kind[1]
    elif kind[0] in ("union", "fixed"):
        for alternative in kind[1]:
            yield from _records_in(alternative)
    elif kind[0] in ("sequence", "dict"):
        yield from _records_in(kind[1])


class Schema:
    """The record classes and compiled field types of one file-format version.

    Attributes:
        version: the file-format version, e.g. ``"3"``.
        classes: the record dataclass of each record type name.
        fields: ``{record type: {field: compiled type}}``, in the dataclass's field order.
        shapes: ``{record type: {field: shape}}`` from :data:`~hookviz.files.schema.SHAPES`.
        not_empty: ``{record type: fields}`` from :data:`~hookviz.files.schema.NOT_EMPTY`.
        pending_only: ``{record type: fields}`` from :data:`~hookviz.files.schema.PENDING_ONLY`.
    """

    def __init__(self, version: str):
        self.version = version
        self.classes: dict[str, type] = {}
        self.fields: dict[str, dict[str, tuple]] = {}
        for name, (module, fields) in schema.records(version).items():
            self.classes[name] = getattr(importlib.import_module(module), name)
            self.fields[name] = {}
            for field, text in fields.items():
                kind = _compile(ast.parse(text, mode="eval").body)
                if field in schema.COUNTS.get(name, ()):
                    kind = _narrowed(kind, "int", "count")
                if field in schema.FRACTIONS.get(name, ()):
                    kind = _narrowed(kind, "float", "fraction")
                self.fields[name][field] = kind
        self.shapes = schema.SHAPES
        self.not_empty = schema.NOT_EMPTY
        self.pending_only = schema.PENDING_ONLY
        named = {n for kinds in self.fields.values() for kind in kinds.values() for n in _records_in(kind)}
        unlisted = sorted(named - set(self.classes))
        if unlisted:
            raise ValueError(f"hookviz.files.schema names record types it does not list: {unlisted}")
        tables = (schema.COUNTS, schema.FRACTIONS, schema.SHAPES, schema.NOT_EMPTY, schema.PENDING_ONLY)
        bounded = [(name, field) for table in tables for name, fields in table.items() for field in fields]
        unknown = [(n, f) for n, f in bounded if f not in schema.RECORDS.get(n, ("", {}))[1]]
        if unknown:
            raise ValueError(f"hookviz.files.schema bounds fields it does not list: {unknown}")


_SCHEMAS: dict[str, Schema] = {}


def compiled(version: str) -> Schema:
    """The :class:`Schema` of file-format ``version`` (one of ``schema.READABLE``), compiled once."""
    if version not in _SCHEMAS:
        _SCHEMAS[version] = Schema(version)
    return _SCHEMAS[version]


def describe(kind: tuple) -> str:
    """A compiled type back in the schema's notation, for messages."""
    tag = kind[0]
    if tag == "union":
        return " | ".join(describe(k) for k in kind[1])
    if tag == "sequence":
        return f"a sequence of {describe(kind[1])}"
    if tag == "fixed":
        return f"tuple[{', '.join(describe(k) for k in kind[1])}]"
    if tag == "dict":
        return f"dict[str, {describe(kind[1])}]"
    if tag == "record":
        return kind[1]
    words = {
        "none": "None",
        "tensor": "torch.Tensor",
        "source": "an edit expression",
        "identifier": "a Python identifier",
        "count": "int",
        "fraction": "float",
    }
    return words.get(tag, tag)


# The Python types of a live value, and of a value read from JSON, of each sort of schema type; a
# sort stored as a JSON object is told by its marker key (a record's by its "__type__").
_LIVE_TYPES = {
    "none": (type(None),),
    "str": (str,),
    "source": (str,),
    "identifier": (str,),
    "bool": (bool,),
    "int": (int,),
    "count": (int,),
    "float": (int, float),
    "fraction": (int, float),
    "tensor": (torch.Tensor,),
    "sequence": (tuple, list),
    "fixed": (tuple, list),
    "dict": (dict,),
}
_STORED_TYPES = {**_LIVE_TYPES, "tensor": (), "sequence": (list,), "fixed": (list,), "dict": ()}
_MARKERS = {
    "float": "__float__",
    "fraction": "__float__",
    "tensor": "__tensor__",
    "sequence": "__tuple__",
    "fixed": "__tuple__",
    "dict": "__dict__",
    "graph": "__graph__",
}


def fits(value, kind: tuple, classes: dict[str, type]) -> bool:
    """Whether a live value is of the (non-union) schema type's sort: picks a union's alternative."""
    if kind[0] == "record":
        return type(value) is classes[kind[1]]
    if isinstance(value, bool) and kind[0] != "bool":
        return False
    return isinstance(value, _LIVE_TYPES.get(kind[0], ()))


def stored_fits(value, kind: tuple) -> bool:
    """Whether a value read from a file's JSON is of the (non-union) schema type's sort."""
    if isinstance(value, dict):
        if kind[0] == "record":
            return value.get("__type__") == kind[1]
        return _MARKERS.get(kind[0]) in value
    return type(value) in _STORED_TYPES.get(kind[0], ())


def out_of_bounds(number: int | float, kind: tuple) -> str | None:
    """What is wrong with a number of the schema type ``kind`` (an int, count, float or fraction)
    beyond its type, in words to follow its place (``run.nodes['x'].order``); None when nothing is."""
    tag = kind[0]
    if tag in ("int", "count"):
        if not INT64_MIN <= number <= INT64_MAX:
            return f"is an integer of {number.bit_length()} bits, past int64 (-2**63 to 2**63 - 1)"
        if tag == "count" and number < 0:
            return f"is {number}, but it is a count, a size or a position: 0 or more"
    elif tag in ("float", "fraction"):
        if isinstance(number, int):
            try:
                float(number)
            except OverflowError:
                return f"is an integer of {number.bit_length()} bits, too large for a float64"
        if tag == "fraction" and not 0 <= number <= 1:
            return f"is {number!r}, but it is a fraction: from 0 to 1"
    return None


def wrong_shape(value, shape: tuple, record: dict) -> str | None:
    """What is wrong with the shape of a tensor (or the length of a sequence) ``value`` that should
    have ``shape`` (see :data:`~hookviz.files.schema.SHAPES`; field names are read in ``record``,
    the fields of its record); None when nothing is (a None value has no shape)."""
    if value is None:
        return None
    expected = [len(record[d]) if isinstance(d, str) else d for d in shape]
    actual = list(value.shape) if isinstance(value, torch.Tensor) else [len(value)]
    if len(actual) == len(expected) and all(e is None or a == e for a, e in zip(actual, expected)):
        return None
    if not isinstance(value, torch.Tensor):
        per = f", one per item of {shape[0]}" if isinstance(shape[0], str) else ""
        return f"has {actual[0]} items, but it should have {expected[0]}{per}"
    words = [f"{d}={len(record[d])}" if isinstance(d, str) else "any" if d is None else str(d) for d in shape]
    return f"has shape {actual}, but it should have shape [{', '.join(words)}]"


def record_problem(types: Schema, name: str, record: dict) -> tuple[str, str] | None:
    """What is wrong across the fields of one record of type ``name`` (its values by field name):
    a shape or length of :data:`~hookviz.files.schema.SHAPES`, an empty sequence of
    :data:`~hookviz.files.schema.NOT_EMPTY`, a None of :data:`~hookviz.files.schema.PENDING_ONLY`
    that ``pending`` does not name (a file before version 3 has none pending); as
    ``(field, problem in words)``, or None."""
    for field, shape in types.shapes.get(name, {}).items():
        problem = wrong_shape(record.get(field), shape, record)  # a field newer than the file: None
        if problem:
            return field, problem
    for field in types.not_empty.get(name, ()):
        if field in record and not record[field]:
            return field, "is empty, but it should hold at least one item"
    for field in types.pending_only.get(name, ()):
        if record[field] is None and field not in record.get("pending", ()):
            return field, "is None, but the record's pending does not name it (a complete record has a value)"
    return None
