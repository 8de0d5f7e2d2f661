"""What a hookviz file may hold: every record type and its fields, per file-format version.

A file is read against this schema and nothing else: a record type, a field or a value of a type not
listed here is refused (:class:`~hookviz.errors.FileFormatError`), so no class named in a file is
ever looked up. Field types use the notation of the dataclasses' annotations:

* ``str``, ``int``, ``float`` (an int or a float; NaN and infinities are stored as ``{"__float__":
  "nan"}``), ``bool``, ``torch.Tensor``, ``None``, and ``A | B``;
* ``tuple[T, ...]`` and ``list[T]`` (a sequence of T, kept a tuple or a list as it was saved),
  ``tuple[A, B, C]`` (exactly those), ``dict[str, T]``;
* the name of a record type below;
* ``EditSource``: an edit's text, which must parse as an expression of
  :mod:`hookviz.edits.expression` or be a callable's name; ``Identifier``: a Python identifier (an
  edit id, written into generated code as part of a function name);
* ``Graph``: version 1's networkx graph, read as the edges ``(producer, consumer, slot)`` it held.

Beyond its type, a value keeps bounds: every int is an int64, every float a float64, and the tables
COUNTS, FRACTIONS, SHAPES, NOT_EMPTY and PENDING_ONLY below say which fields count something, hold a
fraction, have a shape, are never empty, or are None only while pending (:mod:`hookviz.files.fields`
checks them, writing and reading).

Records are the dataclasses named by ``(module, class)``; the modules are imported when a file is
saved or read, not when this one is (``hookviz.data.run`` imports the files layer to save).

Version history:

* 1: a :class:`~hookviz.data.run.Run` keeps its networkx graph (field ``graph``);
* 2: a Run keeps its graph's edges (field ``edges``; the graph is derived from them);
* 3: a lazy run's records keep what is still pending (field ``pending`` of TensorRecord, NodeRecord
  and ModuleCall, whose pending fields are None), and a Run its forward inputs (``input_names``).
  Files of versions 1 and 2 hold complete records: their ``pending`` is ``()``, and
  ``input_names`` is read as empty.
* 4: a watch history keeps, per step, what a step was and did (``RankHistory.update_ratio``,
  ``optimizers``, ``skipped``, ``learning_rates``, ``loss_scales``) and the watch's ``notes``.
  Files of versions 1 to 3 hold none: read as None and empty lists.
* 5: a watch history keeps, with ``optimizer=``, each step's gradient norms before clipping
  (``RankHistory.pre_clip_norm``) and their total (``pre_clip_total``). Files of versions 1 to 4
  hold none: read as None and an empty list.
* 6: a watch history keeps where each update ratio was read (``RankHistory.update_measured``, a
  bool tensor: a ratio read may be NaN) and each parameter's element count (``numels``: a layer's
  zero fraction, for dead-update onsets). Files of versions 1 to 5 hold neither: read as None (a
  ratio then counts as read where it is not NaN) and an empty list.
"""

from __future__ import annotations

from hookviz.errors import FileFormatError

VERSION = 6
READABLE = ("1", "2", "3", "4", "5", "6")

# The object at the top of a file, by the kind its header says.
KINDS = {"run": "Run", "watch": "RankHistory"}

# Fields of the dataclasses that are not data and are never written: a weak reference to the user's
# live model, lazily filled details, an edit's Python callable (a loaded edit gets one that raises).
SKIPPED = {"Run": ("model_ref", "details"), "Edit": ("transform",)}

_TENSOR_RECORD = "TensorRecord | None"

RECORDS: dict[str, tuple[str, dict[str, str]]] = {
    "TensorRecord": (
        "hookviz.data.tensors",
        {
            "shape": "tuple[int, ...]",
            "dtype": "str",
            "device": "str",
            "numel": "int",
            "value": "torch.Tensor | None",
            "norm": "float | None",
            "mean": "float | None",
            "min": "float | None",
            "max": "float | None",
            "nan_count": "int | None",
            "inf_count": "int | None",
            "zero_fraction": "float | None",
            "histogram": "tuple[list[int], list[float]] | None",
            "overview": "torch.Tensor | None",
            "note": "str",
            "nnz": "int | None",
            "pending": "tuple[str, ...]",
        },
    ),
    "SavedTensor": (
        "hookviz.data.run",
        {
            "name": "str",
            "shape": "tuple[int, ...]",
            "dtype": "str",
            "nbytes": "int",
            "stored_on": "str",
            "of": "str",
        },
    ),
    "HookCall": (
        "hookviz.data.run",
        {
            "step": "int",
            "kind": "str",
            "name": "str",
            "where": "str",
            "before": f"tuple[{_TENSOR_RECORD}, ...]",
            "after": f"tuple[{_TENSOR_RECORD}, ...]",
            "returned": "bool",
            "node": "str | None",
        },
    ),
    "HookInfo": ("hookviz.data.run", {"kind": "str", "name": "str", "where": "str"}),
    "Event": ("hookviz.data.run", {"step": "int", "kind": "str", "node": "str | None", "detail": "str"}),
    "LogEntry": ("hookviz.data.run", {"hook": "str", "where": "str", "text": "str"}),
    "NodeRecord": (
        "hookviz.data.run",
        {
            "id": "str",
            "op": "str",
            "module": "str",
            "kind": "str",
            "module_call": "int",
            "order": "int | None",
            "output": _TENSOR_RECORD,
            "grad_outputs": f"tuple[{_TENSOR_RECORD}, ...]",
            "grad_inputs": f"tuple[{_TENSOR_RECORD}, ...]",
            "grad_inputs_before_edit": f"tuple[{_TENSOR_RECORD}, ...] | None",
            "grad_outputs_before_edit": f"tuple[{_TENSOR_RECORD}, ...] | None",
            "saved": "list[SavedTensor]",
            "constants": "dict[str, bool | int | float]",
            "user_hooks": "list[HookInfo]",
            "sites": "list[str]",
            "pending": "tuple[str, ...]",
        },
    ),
    "ModuleCall": (
        "hookviz.data.run",
        {
            "module": "str",
            "call": "int",
            "type": "str",
            "inputs": "dict[str, TensorRecord | str] | None",
            "output": "list[TensorRecord | None] | None",
            "output_replaced": "list[TensorRecord | None] | None",
            "full_hook_fires": "bool",
            "grad_input": f"tuple[{_TENSOR_RECORD}, ...]",
            "grad_output": f"tuple[{_TENSOR_RECORD}, ...]",
            "grad_input_before_edit": f"tuple[{_TENSOR_RECORD}, ...] | None",
            "grad_output_before_edit": f"tuple[{_TENSOR_RECORD}, ...] | None",
            "legacy_grad_input": f"tuple[{_TENSOR_RECORD}, ...]",
            "legacy_grad_output": f"tuple[{_TENSOR_RECORD}, ...]",
            "output_node": "str | None",
            "user_hooks": "list[HookInfo]",
            "in_place": "bool",
            "output_changed_later": "bool",
            "output_requires_grad": "bool",
            "grad_enabled": "bool",
            "output_kind_hookable": "bool",
            "shared_inputs": "bool",
            "pending": "tuple[str, ...]",
        },
    ),
    "Slot": ("hookviz.edits.edit", {"name": "str", "index": "int"}),
    "Edit": (
        "hookviz.edits.edit",
        {"target": "str", "slot": "Slot", "source": "EditSource", "id": "Identifier"},
    ),
    "Run": (
        "hookviz.data.run",
        {
            "loss": "torch.Tensor",
            "device": "str",
            "edges": "list[tuple[str, str, int]]",
            "nodes": "dict[str, NodeRecord]",
            "root": "str",
            "leaf_grads": "dict[str, torch.Tensor]",
            "calls": "list[ModuleCall]",
            "events": "list[Event]",
            "hook_calls": "list[HookCall]",
            "log": "list[LogEntry]",
            "edits": "tuple[Edit, ...]",
            "forward_reused": "bool",
            "asked_grads": "list[str]",
            "notes": "list[str]",
            "loss_differentiates": "bool",
            "module_aliases": "dict[str, str]",
            "parameter_aliases": "dict[str, str]",
            "local_leaf_grads": "dict[str, torch.Tensor | None] | None",
            "input_names": "list[str]",
        },
    ),
    "RankHistory": (
        "hookviz.watching.gather",
        {
            "ranks": "list[int]",
            "steps": "list[int]",
            "names": "list[str]",
            "kinds": "list[str]",
            "local": "torch.Tensor",
            "reduced": "torch.Tensor",
            "order": "torch.Tensor",
            "module_types": "dict[str, str]",
            "strategy": "str",
            "every": "int",
            "run": "Run | None",
            "update_ratio": "torch.Tensor | None",
            "optimizers": "list[str]",
            "skipped": "list[bool]",
            "learning_rates": "list[list[float]]",
            "loss_scales": "list[float]",
            "notes": "list[str]",
            "pre_clip_norm": "torch.Tensor | None",
            "pre_clip_total": "list[float]",
            "update_measured": "torch.Tensor | None",
            "numels": "list[int]",
        },
    ),
}

_ADDED_IN_4 = ("update_ratio", "optimizers", "skipped", "learning_rates", "loss_scales", "notes")
_ADDED_IN_5 = ("pre_clip_norm", "pre_clip_total")
_ADDED_IN_6 = ("update_measured", "numels")

# What a value must be beyond its type: a crafted file could otherwise hold values that no run has
# and that break a later read (a norm of 10**400 that no float holds, a loss of three elements).
# Every int in a file is an int64 and every float a float64 (a JSON int too large for one is
# refused); besides, every int in these fields is 0 or more (sizes, counts, positions, steps) ...
COUNTS = {
    "TensorRecord": ("shape", "numel", "nan_count", "inf_count", "histogram", "nnz"),
    "SavedTensor": ("shape", "nbytes"),
    "HookCall": ("step",),
    "Event": ("step",),
    "NodeRecord": ("module_call", "order"),
    "ModuleCall": ("call",),
    "Slot": ("index",),
    "Run": ("edges",),
    "RankHistory": ("ranks", "steps", "every", "numels"),
}
# ... every float in these is from 0 to 1 ...
FRACTIONS = {"TensorRecord": ("zero_fraction",)}
# ... these tensors (and sequences) have this shape (length): an int is that size, None any size,
# a field's name the length of that field of the same record ...
SHAPES = {
    "Run": {"loss": ()},
    "TensorRecord": {"overview": (None, None)},
    "RankHistory": {
        "kinds": ("names",),
        "local": ("ranks", "steps", "names", 4),
        "reduced": ("steps", "names", 4),
        "order": ("ranks", "names"),
        "update_measured": ("steps", "names"),
    },
}
# ... these sequences hold at least one item ...
NOT_EMPTY = {"RankHistory": ("ranks",)}
# ... and these are None only while the record's ``pending`` names them (a lazy run's record);
# complete, a record holds a value there (other deferred fields may be None: no value was kept).
PENDING_ONLY = {
    "TensorRecord": ("nan_count", "inf_count", "zero_fraction"),
    "ModuleCall": ("inputs", "output"),
}

# Where this schema states a field more precisely than the dataclass annotates it.
REFINED = {
    ("Edit", "source"): "str",
    ("Edit", "id"): "str",
    ("Run", "edits"): "tuple",
    ("RankHistory", "run"): "object",
}


def records(version: str) -> dict[str, tuple[str, dict[str, str]]]:
    """The record types of file-format ``version`` (one of :data:`READABLE`), by class name:
    ``name -> (module, {field: type})``.

    Raises:
        FileFormatError: ``version`` is not one of :data:`READABLE`.
    """
    if version not in READABLE:
        raise FileFormatError(
            f"file-format version {version!r} is not one this hookviz reads ({', '.join(READABLE)}); "
            "upgrade hookviz to read a newer file"
        )
    if version == "6":
        return RECORDS
    later = {"5": (), "4": _ADDED_IN_5}.get(version, _ADDED_IN_5 + _ADDED_IN_4)
    added = {"RankHistory": _ADDED_IN_6 + later}
    if version not in ("3", "4"):
        added.update({"TensorRecord": ("pending",), "NodeRecord": ("pending",), "ModuleCall": ("pending",)})
        added["Run"] = ("input_names",)
    older = {
        name: (module, {f: kind for f, kind in fields.items() if f not in added.get(name, ())})
        for name, (module, fields) in RECORDS.items()
    }
    if version == "1":
        module, fields = older["Run"]
        run = {("graph" if name == "edges" else name): kind for name, kind in fields.items()}
        run["graph"] = "Graph"
        older["Run"] = (module, run)
    return older
