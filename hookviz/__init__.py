"""hookviz: see and edit PyTorch hooks and gradients.

``Session(model, args, loss_fn=...)`` records the autograd graph of one forward + backward with every
node's gradients; ``Session.edit`` changes the gradient a hook returns; ``Session.run`` re-runs
backward; ``hookviz.show(...)`` draws it all as a widget in Jupyter.
"""

import typing

from hookviz.analysis.diagnose import diagnose
from hookviz.analysis.explain import explain
from hookviz.analysis.findings import Finding
from hookviz.data.diff import Diff, diff
from hookviz.data.run import ModuleCall, ModuleGrads, NodeRecord, Run
from hookviz.data.tensors import TensorRecord
from hookviz.edits.edit import Edit
from hookviz.errors import (
    BackwardError,
    DetailsChanged,
    DetailsNotReproduced,
    DetailsPending,
    DetailsRefused,
    DetailsUnavailable,
    DeviceError,
    EditError,
    ExpressionError,
    ExtraError,
    FileFormatError,
    ForwardError,
    HookvizError,
    LossError,
    PathError,
    ReadOnlyError,
    TargetError,
    UnsupportedError,
    WatchError,
)
from hookviz.files.saving import load, save
from hookviz.integrations.optimizers import unwrap  # registers frameworks' optimizer wrappers with the watch
from hookviz.record.devices import devices
from hookviz.record.session import Session
from hookviz.watching.gather import RankHistory
from hookviz.watching.watch import Watch, watch

if typing.TYPE_CHECKING:  # imported on first use (see __getattr__); named here for type checkers and the docs
    from hookviz.widget.compare import compare
    from hookviz.widget.show import show, show_watch
    from hookviz.widget.widget import Widget
del typing, unwrap  # the namespace holds the public API only

__all__ = [
    "BackwardError",
    "DetailsChanged",
    "DetailsNotReproduced",
    "DetailsPending",
    "DetailsRefused",
    "DetailsUnavailable",
    "DeviceError",
    "Diff",
    "Edit",
    "EditError",
    "ExpressionError",
    "ExtraError",
    "ForwardError",
    "HookvizError",
    "LossError",
    "ModuleCall",
    "ModuleGrads",
    "NodeRecord",
    "Run",
    "Session",
    "TargetError",
    "UnsupportedError",
    "TensorRecord",
    "devices",
    "diff",
    "show",
    "Widget",
    "Finding",
    "diagnose",
    "explain",
    "save",
    "Watch",
    "WatchError",
    "watch",
    "show_watch",
    "load",
    "FileFormatError",
    "PathError",
    "ReadOnlyError",
    "RankHistory",
    "compare",
]
__version__ = "0.2.0"


def __getattr__(name: str):
    # The widget pulls in anywidget; import it only when asked for.
    if name == "Widget":
        from hookviz.widget.widget import Widget

        return Widget
    if name == "compare":
        from hookviz.widget.compare import compare

        return compare
    if name in ("show", "show_watch"):
        from hookviz.widget import show

        return getattr(show, name)
    raise AttributeError(f"module 'hookviz' has no attribute {name!r}")
