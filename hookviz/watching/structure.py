"""The parameters a watch watches, followed: a parameter or module replaced mid-training is followed to
its new tensor (its step-start hook moves with it); one added after the watch opened is named in a
warning. :class:`WatchedParameters` owns a :class:`hookviz.watching.watch.Watch`'s parameter
columns; the watch's hooks ask it.

When the model is looked at: at the first hook of each backward, before any ``.grad`` changes
(:meth:`WatchedParameters.check_at_backward`). The whole look (every module's parameters and
submodules) runs when a parameter or submodule was assigned to any module since the last look
(PyTorch's global registration hooks, ``torch.nn.modules.module.register_module_parameter_registration_hook``
and ``register_module_module_registration_hook``, count every ``module.x = ...``, ``add_module`` and
``register_parameter``), and every :data:`FULL_CHECK_EVERY` backwards for writes that bypass them
(``module._parameters[name] = p``); a backward that did not reach every column also follows
replaced parameters at its end (:meth:`WatchedParameters.follow_replaced`), so a replaced parameter
is read from its first step. The frozen parameters are looked at every backward.
"""

from __future__ import annotations

import operator
import os
import sys
import threading
import warnings
import weakref
from operator import attrgetter

import torch

from hookviz.advice import advice
from hookviz.errors import WatchError

# The whole model is looked at every this many backwards even when no registration was counted.
FULL_CHECK_EVERY = 16
_requires_grad = attrgetter("requires_grad")


class _Registrations:
    """Every parameter and submodule registration of any module, counted while a watch listens
    (PyTorch's global module registration hooks, removed when the last watch stops listening)."""

    def __init__(self) -> None:
        self.count = 0
        self._listeners = 0
        self._handles: list = []
        self._lock = threading.Lock()

    def _registered(self, module, name, value) -> None:
        self.count += 1  # returns None: the value is registered as it is

    def listen(self):
        """Start counting (the first listener registers the hooks); returns a handle whose
        ``remove()`` stops this listener (the last one removes the hooks), or None when this
        PyTorch has no global registration hooks: the caller then looks at the whole model every
        backward."""
        hooks = torch.nn.modules.module
        if not hasattr(hooks, "register_module_parameter_registration_hook"):
            return None
        with self._lock:
            if not self._listeners:
                self._handles = [
                    hooks.register_module_parameter_registration_hook(self._registered),
                    hooks.register_module_module_registration_hook(self._registered),
                ]
            self._listeners += 1
        return _Listener(self)

    def stop(self) -> None:
        """One listener stopped; the last one removes the hooks."""
        with self._lock:
            self._listeners -= 1
            if not self._listeners:
                for handle in self._handles:
                    handle.remove()
                self._handles = []


class _Listener:
    """One listener of :class:`_Registrations`; ``remove()`` (idempotent) stops it."""

    def __init__(self, registrations: _Registrations) -> None:
        self._registrations: _Registrations | None = registrations

    def remove(self) -> None:
        registrations, self._registrations = self._registrations, None
        if registrations is not None:
            registrations.stop()


REGISTRATIONS = _Registrations()
_INSIDE = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(torch.__file__))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the caller's first frame outside hookviz and torch (the user's line
    that ran the forward or backward), for a warning raised by a hook."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_INSIDE):
        frame, level = frame.f_back, level + 1
    return level


def check_options(
    model: torch.nn.Module, every: int, stats_every: int, capacity: int, parameters: bool, outputs: bool
) -> None:
    """The options of :func:`hookviz.watch`, checked before anything is hooked.

    Raises:
        WatchError: ``model`` is not a module, or an option is out of its range.
    """
    if not isinstance(model, torch.nn.Module):
        raise WatchError(f"watch() needs a torch.nn.Module, got {type(model).__name__}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise WatchError(f"every={every!r} must be a positive int (1 = every step)")
    if isinstance(stats_every, bool) or not isinstance(stats_every, int) or stats_every < 1:
        raise WatchError(
            f"stats_every={stats_every!r} must be a positive int (1 = every statistic every step)"
        )
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 2:
        raise WatchError(f"capacity={capacity!r} must be an int of at least 2 (steps kept)")
    if not parameters and not outputs:
        raise WatchError("parameters=False and outputs=False leaves nothing to watch: keep one")


def trainable_at_open(model: torch.nn.Module, watches: list) -> list[tuple[str, torch.nn.Parameter]]:
    """``model``'s ``(name, parameter)`` that require grad, once it is known that no open watch of
    ``watches`` (every watch made in this process, alive) watches ``model`` itself.

    Raises:
        WatchError: no parameter requires grad; ``model`` already has an open watch; as
            :func:`check_at_open`.
    """
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        raise WatchError(
            f"{type(model).__name__} has no parameter that requires grad, so training it makes no "
            "gradients to watch; set requires_grad=True on the parameters you train (or unfreeze them)"
        )
    if any(w.model is model and not w.closed for w in watches):
        raise WatchError(
            f"{type(model).__name__} is already watched by an open watch; close it first "
            f"({advice('close_watch')}, or open watches with `with {advice('watch')} as watch:` so "
            "they close)"
        )
    check_at_open(model, [w for w in watches if w.model is not None])
    return trainable


def grad_and_version(parameter: torch.Tensor) -> tuple[weakref.ref | None, int]:
    """A weak reference to ``parameter.grad`` and its version counter (``(None, -1)`` without one):
    to tell later which ``.grad`` a backward changed, keeping no gradient alive."""
    grad = parameter.grad
    return (None, -1) if grad is None else (weakref.ref(grad), grad._version)


def check_at_open(model: torch.nn.Module, others: list) -> None:
    """Refuse a model the watch cannot hook; warn when another open watch (of ``others``) watches
    one of its parameters (each would count the other's backwards as its own steps).

    Raises:
        WatchError: ``model`` is a TorchScript module.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise WatchError(
            f"{type(model).__name__} is a TorchScript module: a scripted forward runs no Python "
            "forward hook and its graph is not the eager autograd graph the watch follows; watch "
            f"the eager model ({advice('watch')} before torch.jit.script, or on the nn.Module "
            "you scripted)"
        )
    mine = {id(p): n for n, p in model.named_parameters() if p.requires_grad}
    for other in others:
        shared = [mine[id(p)] for p in other.model.parameters() if id(p) in mine]
        if shared:
            listed = ", ".join(repr(n) for n in shared[:3]) + (" ..." if len(shared) > 3 else "")
            warnings.warn(
                f"hookviz.watch: {len(shared)} parameter(s) of {type(model).__name__} ({listed}) are "
                f"also watched by an open watch of {other.model_name}: a backward that reaches "
                "them is a step of both watches. Close the other watch first, or watch the model "
                "that holds both (one watch sees every backward)",
                RuntimeWarning,
                stacklevel=4,
            )


class WatchedParameters:
    """The one owner of a watch's parameter columns: the parameter each column reads (followed when
    replaced), the module and attribute that hold it, the parameters frozen at open, the model's
    structure as last seen and the names already warned about. Others ask it
    (:meth:`follow_replaced`, :meth:`check_structure`, ...); hooks read :attr:`parameters` (a list
    indexed by column) and the optimizer steps :attr:`column_of`. ``start_hook(parameters,
    column)`` makes the step-start tensor hook of a column
    (:func:`hookviz.watching.hooks.step_start_hook`, its watch bound).

    Attributes:
        names: the watched parameters' qualified names, one per column (``[]`` under
            ``parameters=False``).
        parameters: the tensor each column reads now (``names[c]``'s parameter); one list for the
            watch's life, changed in place (the step-start hooks hold it).
        column_of: ``{id(parameter): column}``.
        owners: ``(module, attribute name)`` that holds each column's parameter.
        grads_at_open: per trainable parameter, :func:`grad_and_version` of its ``.grad`` at open.
        hooked_modules: the modules whose outputs are watched (``outputs=True``).
        sharded: FSDP2, which swaps sharded and unsharded parameters itself: none is followed.
        empty: a column's parameter has no elements (its ``.grad`` is never read), as last looked at.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        trainable: list[tuple[str, torch.nn.Parameter]],
        parameters: bool,
        lock,
        handles,
        start_hook,
    ):
        self.model: torch.nn.Module | None = model
        self.names = [n for n, _ in trainable] if parameters else []
        self.parameters = [p for _, p in trainable] if parameters else []
        self.owners = [owner_of(model, n) for n in self.names]
        self.column_of = {id(p): c for c, p in enumerate(self.parameters)}
        self._note_empty()
        # weakly: the watch keeps no gradient alive (only to tell which .grad changed while open)
        self.grads_at_open = [grad_and_version(p) for _, p in trainable]
        self.hooked_modules: list[torch.nn.Module] = []
        self.sharded = False
        self._trainable = [p for _, p in trainable]
        self._frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
        self._structure = structure_of(model)  # to notice parameters and modules added or replaced
        self._warned: set[str] = set()  # names already named in a warning
        self._lock, self._handles, self._start_hook = lock, handles, start_hook
        # registrations counted when the model was last looked at (None: not counted, look always);
        # the listener is one of the watch's handles: removed at close, or when the watch is collected
        listener = REGISTRATIONS.listen()
        self._looked_at: int | None = None if listener is None else REGISTRATIONS.count
        if listener is not None:
            handles.add(listener)
        self._since_look = 0  # backwards since the model was last looked at

    def add_start_hooks(self) -> None:
        """Put the step-start tensor hook on every trainable parameter (column -1 for each under
        ``parameters=False``: it starts steps, but has no column)."""
        for column, parameter in enumerate(self._trainable):
            hook = self._start_hook(self.parameters, column if self.names else -1)
            self._handles.add_start(parameter, parameter.register_hook(hook))

    def numels(self) -> list[int]:
        """Each column's parameter's element count."""
        return [p.numel() for p in self.parameters]

    def _note_empty(self) -> None:
        """Note whether a column's parameter has no elements (``empty``), when the columns may
        have changed: the hooks read it every backward."""
        self.empty = 0 in self.numels()

    def changed_since_open(self) -> list[str]:
        """The names of the trainable parameters whose ``.grad`` changed since the watch opened."""
        trainable = ((n, p) for n, p in self.model.named_parameters() if p.requires_grad)
        return [
            name
            for (name, parameter), (grad, version) in zip(trainable, self.grads_at_open)
            if parameter.grad is not None
            and (grad is None or parameter.grad is not grad() or parameter.grad._version != version)
        ]

    def release(self) -> None:
        """The watch closed: let go of the model and its parameters (callers hold the lock)."""
        self.model, self.parameters, self.owners, self._structure = None, [], [], ([], [], [])
        self.hooked_modules, self._trainable, self.grads_at_open, self._frozen = [], [], [], []

    def check_at_backward(self) -> None:
        """At the first hook of a backward, before any ``.grad`` changed (outside the watch's lock):
        look at the model (:meth:`check_structure`, :meth:`follow_replaced`) when a parameter or
        submodule was registered anywhere since the last look, or every :data:`FULL_CHECK_EVERY`
        backwards; and at the frozen parameters (:meth:`check_unfrozen`) every time."""
        count = REGISTRATIONS.count
        if self._looked_at is None or count != self._looked_at or self._since_look >= FULL_CHECK_EVERY:
            if self._looked_at is not None:
                self._looked_at = count
            self._since_look = 0
            self.check_structure()
            self.follow_replaced()
            self._note_empty()  # also when only a parameter's .data was swapped for another size
        else:
            self._since_look += 1
        self.check_unfrozen()

    def check_unfrozen(self) -> None:
        """At each backward's first hook: warn once, naming them, about parameters frozen when the
        watch opened that now require grad (gradual unfreezing): the watch has no column for them."""
        if not self._frozen or not any(map(_requires_grad, (p for _, p in self._frozen))):
            return
        thawed = [n for n, p in self._frozen if p.requires_grad]
        self._frozen = [(n, p) for n, p in self._frozen if not p.requires_grad]
        listed = ", ".join(repr(n) for n in thawed[:5]) + (" ..." if len(thawed) > 5 else "")
        warnings.warn(
            f"hookviz.watch: {len(thawed)} parameter(s) of {type(self.model).__name__} ({listed}) were "
            "frozen when the watch opened and now require grad: they are not watched (no column, no "
            "step reads them). Open the watch after unfreezing, or close this one and open a new one "
            f"({advice('watch')}) to watch them",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
        )

    def check_structure(self) -> None:
        """When a module gained or lost a parameter or a submodule since the watch opened (or the
        last check), follow the columns' parameters to their modules now and warn, naming what this
        watch cannot see (:meth:`check_at_backward` says when it runs)."""
        modules, counts, children = self._structure
        # two list comparisons, their elements compared in C (a dict by its items)
        if [len(m._parameters) for m in modules] == counts and [m._modules for m in modules] == children:
            return
        model = self.model
        self._structure = structure_of(model)
        owners = dict(model.named_modules())
        for column, name in enumerate(self.names):  # a replaced module's parameters
            path, _, attribute = name.rpartition(".")
            if path in owners and attribute in owners[path]._parameters:
                self.owners[column] = (owners[path], attribute)
        unseen: dict[str, str] = {}  # name -> "parameter" or "module"
        if self.names:
            watched = set(self.names)
            for name, parameter in model.named_parameters():
                if parameter.requires_grad and name not in watched:
                    unseen[name] = "parameter"
        if self.hooked_modules:
            hooked = set(map(id, self.hooked_modules))
            unseen.update((name, "module") for name, m in owners.items() if id(m) not in hooked)
        new = {name: kind for name, kind in unseen.items() if name not in self._warned}
        if new:
            self._warned.update(new)
            listed = ", ".join(f"{kind} {name!r}" for name, kind in new.items())
            one = len(new) == 1
            warnings.warn(
                f"hookviz.watch: {listed} of {type(model).__name__} {'was' if one else 'were'} "
                f"added or replaced after the watch opened and {'is' if one else 'are'} not watched; "
                f"close this watch and open a new one ({advice('watch')}) to watch "
                f"{'it' if one else 'them'}",
                stacklevel=_user_stacklevel(),
            )

    def follow_replaced(self) -> list[int]:
        """Point a column whose parameter was replaced on its module at the new one, and move its
        step-start hook there; returns the columns moved. FSDP2 swaps its sharded and unsharded
        parameters itself: left alone (its unsharded parameters' hooks start the steps,
        :mod:`hookviz.watching.gather`)."""
        if self.sharded:
            return []
        held = [owner._parameters.get(attribute) for owner, attribute in self.owners]
        if all(map(operator.is_, held, self.parameters)):  # none replaced
            return []
        moved = []
        with self._lock:  # two threads' backwards may both find it: one moves it, under the lock
            for column, (owner, attribute) in enumerate(self.owners):
                current = owner._parameters.get(attribute)
                if current is not self.parameters[column] and current is not None:
                    old = self.parameters[column]
                    self.parameters[column] = current
                    self.column_of.pop(id(old), None)
                    self.column_of[id(current)] = column
                    hook = self._start_hook(self.parameters, column) if current.requires_grad else None
                    self._handles.move_start(old, current if hook else None, hook)
                    moved.append(column)
            self._note_empty()
        return moved


def owner_of(model: torch.nn.Module, name: str) -> tuple[torch.nn.Module, str]:
    """The module that holds parameter ``name`` and its attribute name there."""
    path, _, attribute = name.rpartition(".")
    return model.get_submodule(path), attribute


def structure_of(model: torch.nn.Module) -> tuple[list[torch.nn.Module], list[int], list[dict]]:
    """Each module, its parameter count and a copy of its submodules by name: what
    :meth:`WatchedParameters.check_structure` compares."""
    modules = list(model.modules())
    return modules, [len(m._parameters) for m in modules], [dict(m._modules) for m in modules]
