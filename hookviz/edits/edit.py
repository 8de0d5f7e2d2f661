"""Hook sites and edits: where a hook may return a replacement gradient, and what it returns.

Sites (PyTorch names, https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution):

========================  ================================  =========================================
slot                      target                            the PyTorch hook that does the same
========================  ================================  =========================================
``grad_inputs[i]``        a Node id                         ``node.register_hook`` (post-hook)
``grad_outputs[i]``       a Node id                         ``node.register_prehook``
``grad``                  a leaf name or Node id            ``tensor.register_hook`` on the leaf /
                                                            on the Node's (first) output
``grad_output[i]``        a module name                     ``module.register_full_backward_pre_hook``
``grad_input[i]``         a module name                     ``module.register_full_backward_hook``
========================  ================================  =========================================
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from hookviz.edits.expression import Expression
from hookviz.errors import EditError, ExpressionError

_SLOT = re.compile(r"^(grad_inputs|grad_outputs|grad_input|grad_output)\[(\d+)\]$|^grad$")
_ids = itertools.count(1)


@dataclass(frozen=True)
class Slot:
    """A parsed slot: ``name`` is one of grad_inputs, grad_outputs, grad, grad_input, grad_output."""

    name: str
    index: int = 0

    @property
    def on_module(self) -> bool:
        """True for module slots (``grad_input`` / ``grad_output``)."""
        return self.name in ("grad_input", "grad_output")

    def __str__(self) -> str:
        return "grad" if self.name == "grad" else f"{self.name}[{self.index}]"


def parse_slot(slot: str) -> Slot:
    """``"grad_inputs[1]"`` -> ``Slot("grad_inputs", 1)``. Raises EditError for anything else."""
    match = _SLOT.match(slot.strip()) if isinstance(slot, str) else None
    if match is None:
        raise EditError(
            f"slot {slot!r} is not a hook site; use 'grad_inputs[i]' or 'grad_outputs[i]' on a node, "
            "'grad' on a leaf or node, 'grad_input[i]' or 'grad_output[i]' on a module"
        )
    if match.group(1) is None:
        return Slot("grad")
    return Slot(match.group(1), int(match.group(2)))


@dataclass
class Edit:
    """A transform attached to a hook site.

    Attributes:
        target: node id, leaf name or module qualified name ("" = root module).
        slot: the parsed slot.
        transform: a callable ``grad -> Tensor`` or an :class:`~hookviz.edits.expression.Expression`.
        source: the expression text, or the callable's name.
        id: unique id such as ``"e3"``.
    """

    target: str
    slot: Slot
    transform: Callable[[torch.Tensor], torch.Tensor]
    source: str
    id: str = field(default_factory=lambda: f"e{next(_ids)}")

    @classmethod
    def make(
        cls, target: str, slot: str | Slot, transform: str | Callable[[torch.Tensor], torch.Tensor]
    ) -> Edit:
        """Build an edit; a string transform is parsed now, so a bad one fails here.

        Args:
            target: node id, leaf name or module qualified name ("" = root module).
            slot: a hook site at ``target`` (``"grad_inputs[0]"``, ``"grad_outputs[1]"``, ``"grad"``,
                ``"grad_input[0]"``, ``"grad_output[0]"``), or a parsed one.
            transform: an expression over ``grad`` (``"grad * 3"``) or a callable
                ``grad -> Tensor`` of the same shape, dtype and device.

        Raises:
            ExpressionError: the expression does not parse or uses something the language forbids.
            EditError: ``transform`` is neither a string nor a callable, or ``slot`` is malformed.
        """
        parsed = slot if isinstance(slot, Slot) else parse_slot(slot)
        if isinstance(transform, str):
            return cls(target, parsed, Expression(transform), transform.strip())
        if callable(transform):
            name = getattr(transform, "__qualname__", None) or type(transform).__name__
            return cls(target, parsed, transform, name)
        raise EditError(
            f"transform must be an expression string such as 'grad * 3' or a callable grad -> Tensor, "
            f"got {type(transform).__name__}"
        )

    def on_grad_outputs(self, node_id: str, output_nr: int) -> Edit:
        """The same edit (same id and transform) on a Node's ``grad_outputs[output_nr]``: where a
        tensor hook on that output, or a module's ``grad_output`` hook, acts in the graph.

        Args:
            node_id: the Node that made the tensor.
            output_nr: which of that Node's outputs the tensor is.
        """
        return Edit(node_id, Slot("grad_outputs", output_nr), self.transform, self.source, id=self.id)

    @property
    def where(self) -> str:
        """Human-readable site, e.g. ``"SubBackward0_0 grad_inputs[0]"``."""
        return f"{self.target or '<root module>'} {self.slot}"

    def apply(self, grad: torch.Tensor | None) -> torch.Tensor | None:
        """Run the transform on ``grad`` and check the result.

        Returns ``grad`` unchanged when it is None (no gradient flowed through this site).

        Args:
            grad: the gradient at the site, or None.

        Raises:
            EditError: the transform raised, or returned something that is not a tensor of
                ``grad``'s shape, dtype and device.
            ExpressionError: an expression refused while it ran (shapes that do not broadcast,
                a result too large), naming the site.
        """
        if grad is None:
            return None
        try:
            # No torch.no_grad() here: in a backward with create_graph=True (a loss_fn that
            # differentiates) the edit must stay differentiable, as a plain PyTorch hook's is.
            result = self.transform(grad)
        except EditError:
            raise
        except ExpressionError as error:
            raise ExpressionError(f"edit {self.source!r} at {self.where}: {error}") from None
        except Exception as error:  # a user callable may raise anything; name the site
            raise EditError(
                f"edit {self.source!r} at {self.where} raised {type(error).__name__}: {error}"
            ) from error
        if isinstance(result, (int, float)) and not isinstance(result, bool):
            result = torch.full_like(grad, result)
        expected = (
            f"shape {list(grad.shape)}, dtype {str(grad.dtype).removeprefix('torch.')}, device {grad.device}"
        )
        if not isinstance(result, torch.Tensor):
            raise EditError(
                f"edit {self.source!r} at {self.where} returned {type(result).__name__}; expected a "
                f"tensor of {expected}"
            )
        if result.shape != grad.shape:
            raise EditError(
                f"edit {self.source!r} at {self.where} returned shape {list(result.shape)}; expected "
                f"{expected} (the gradient at that site)"
            )
        if result.dtype != grad.dtype or result.device != grad.device:
            got = f"dtype {str(result.dtype).removeprefix('torch.')}, device {result.device}"
            raise EditError(
                f"edit {self.source!r} at {self.where} returned {got}; expected {expected}"
                + (
                    "; a comparison gives booleans: use where(cond, a, b)"
                    if result.dtype == torch.bool
                    else ""
                )
            )
        return result

    def code(self) -> str:
        """The transform as Python source over ``grad``."""
        if isinstance(self.transform, Expression):
            return self.transform.as_torch_code()
        return f"transform_{self.id}(grad)"

    def callable_source(self) -> str | None:
        """For a callable transform, source that defines ``transform_<id>``; None for expressions."""
        if isinstance(self.transform, Expression):
            return None
        name = f"transform_{self.id}"
        try:
            source = textwrap.dedent(inspect.getsource(self.transform))
        except (OSError, TypeError):
            return f"{name} = ...  # your callable {self.source!r}: define it here (grad -> Tensor)"
        if getattr(self.transform, "__name__", "") == "<lambda>":
            lambdas = (
                [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Lambda)]
                if _parses(source)
                else []
            )
            if len(lambdas) == 1:
                return f"{name} = {ast.get_source_segment(source, lambdas[0])}"
            return f"{name} = ...  # your lambda: {source.strip()!r}"
        return f"{source.rstrip()}\n{name} = {self.transform.__name__}"

    def __repr__(self) -> str:
        return f"Edit({self.id}: {self.where} <- {self.source!r})"


# What Edit.make records as a callable's source: its __qualname__ ("scale", "Model.clip",
# "make.<locals>.<lambda>") or its type's name.
_CALLABLE_NAME = re.compile(r"^[A-Za-z_<][A-Za-z0-9_<>]*(\.[A-Za-z_<][A-Za-z0-9_<>]*)*$")


def check_source(source: str) -> None:
    """Check an edit's recorded text, as read from a file: an expression of
    :mod:`hookviz.edits.expression`, or the name of a callable (what :meth:`Edit.make` records).

    Raises:
        EditError: anything else (a newline, a statement, code that is neither), naming the fix.
    """
    if not isinstance(source, str):
        raise EditError(f"an edit's source must be a string, got {type(source).__name__}")
    if _CALLABLE_NAME.match(source) and len(source) <= 200:
        return
    try:
        Expression(source)
    except ExpressionError as error:
        raise EditError(
            f"the edit source {source[:200]!r} is neither an edit expression nor a callable's name "
            f"({error}); a file holding it was not written by hookviz: ask for the file again"
        ) from None


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def replace_slots(grads: tuple, edits: list[Edit]) -> tuple[tuple, bool]:
    """Apply each edit to ``grads[edit.slot.index]``; returns the new tuple and whether anything ran."""
    new = list(grads)
    for edit in edits:
        new[edit.slot.index] = edit.apply(new[edit.slot.index])
    return tuple(new), bool(edits)
