"""The one owner of a watch's hook handles: :class:`Handles` adds them and removes every one on close.

A watch registers hooks on the model and its modules (forward hooks), on its parameters (tensor
hooks that start a step, post-accumulate-grad hooks under DDP / FSDP2), on the optimizers (step
hooks) and on the graphs of forwards (Node pre-hooks, alive as long as their graph). Each is added
here, as a ``torch.utils.hooks.RemovableHandle`` (or anything with ``remove()``), and
:meth:`Handles.remove` removes them all (idempotent), as a ``RemovableHandle`` removes one hook.
"""

from __future__ import annotations

import threading

import torch


class Handles:
    """Every hook handle of one watch (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: list = []  # on the model, parameters, optimizers: until close
        self._graph: list = []  # on forwards' graphs: dropped once the graph is freed
        self._graph_kept = 64  # prune dead graph handles when there are twice this many
        self._starts: list[tuple[torch.Tensor, object]] = []  # (parameter, its step-start hook)

    @property
    def on_graphs(self) -> list:
        """The handles on forwards' graphs still held (a copy)."""
        with self._lock:
            return list(self._graph)

    def add(self, handle) -> None:
        """Keep ``handle`` until :meth:`remove`."""
        with self._lock:
            self._handles.append(handle)

    def add_graph(self, handle) -> None:
        """Keep a hook handle on a forward's graph until that graph is freed (then its handle is
        dropped, so handles do not pile up over forwards that never see a backward)."""
        with self._lock:
            self._graph.append(handle)
            if len(self._graph) > 2 * self._graph_kept:
                self._graph[:] = [h for h in self._graph if h.hooks_dict_ref() is not None]
                self._graph_kept = max(64, len(self._graph))

    def add_start(self, parameter: torch.Tensor, handle) -> None:
        """Keep the step-start tensor hook ``handle`` of ``parameter``."""
        with self._lock:
            self._starts.append((parameter, handle))

    def move_start(self, old: torch.Tensor, new: torch.Tensor | None, hook) -> None:
        """Remove ``old``'s step-start hooks; put ``hook`` on ``new`` (None: nowhere)."""
        with self._lock:
            for _, handle in [s for s in self._starts if s[0] is old]:
                handle.remove()
            self._starts[:] = [s for s in self._starts if s[0] is not old]
            if new is not None:
                self._starts.append((new, new.register_hook(hook)))

    def started(self, parameter: torch.Tensor) -> bool:
        """Whether ``parameter`` has a step-start hook."""
        with self._lock:
            return any(p is parameter for p, _ in self._starts)

    def remove(self) -> None:
        """Remove every hook added (idempotent)."""
        with self._lock:
            handles = self._handles + self._graph + [h for _, h in self._starts]
            self._handles, self._graph, self._starts = [], [], []
        for handle in handles:
            handle.remove()
