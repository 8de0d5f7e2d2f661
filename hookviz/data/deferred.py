"""Fields that wait: a run's records made on first read, and details that wait for an explicit fill.

Two kinds of waiting, and neither ever runs the user's model:

- :class:`Deferrable` (a :class:`~hookviz.data.run.Run`): its records (``nodes``, ``calls``, ...)
  are made from what the run already recorded, the first time one of them is read. The source
  holds plain data and the run's own gradients; making the records is bookkeeping, not a
  forward or a backward. Python's ``__getattr__`` runs only when normal lookup finds nothing, so
  a made field costs nothing extra to read.
- :class:`Fillable` (``TensorRecord``, ``NodeRecord``, ``ModuleCall``): in a run recorded with
  ``details="lazy"`` the fields named in the class's ``DEFERRED`` that the run did not record
  (values, statistics, forward values) hold ``None``, and the record's ``pending`` field names
  them. Reading one, ``repr``, ``==``, ``copy``, pickling and saving all see that state as it is;
  only :meth:`hookviz.data.run.Run.fill_details` (which records the run again, see
  :mod:`hookviz.record.details`) sets them. A :class:`~hookviz.data.run.ModuleCall` (what
  ``Run.module_io`` returns) holds :data:`PENDING` there instead of None, so printing it says so
  and using it raises :class:`~hookviz.errors.DetailsPending`, which says what to call.
"""

from __future__ import annotations

from hookviz.advice import advice
from hookviz.errors import DetailsPending

_PENDING_MESSAGE = (
    'this value is not recorded yet: the run was recorded lazily (details="lazy", or a '
    f"run too large to record in full at once) and its values wait for {advice('fill_details')}; call "
    f"{advice('fill_details')} first, or record with {advice('eager_session')}"
)


class Pending:
    """The value of a lazy record's field that waits for ``run.fill_details()`` (one object,
    :data:`PENDING`). It prints as ``<pending: call run.fill_details()>``, is falsy, and raises
    :class:`~hookviz.errors.DetailsPending` (naming the fix) when indexed, iterated, measured,
    converted to a number, formatted with a spec, or asked for an attribute. Copies and pickles
    are :data:`PENDING` itself."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<pending: call {advice('fill_details')}>"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "PENDING"  # the module attribute: copy and pickle give the one object back

    def __format__(self, spec: str) -> str:
        if spec:
            raise DetailsPending(_PENDING_MESSAGE)
        return repr(self)

    def __getattr__(self, name: str):
        if name.startswith("__"):  # protocols (copy, pickle, numpy) look for these: not found
            raise AttributeError(name)
        raise DetailsPending(_PENDING_MESSAGE)

    def _refuse(self, *_):
        raise DetailsPending(_PENDING_MESSAGE)

    __getitem__ = __iter__ = __len__ = __contains__ = __float__ = __int__ = __index__ = _refuse


PENDING = Pending()
"""What a pending field of a :class:`~hookviz.data.run.ModuleCall` holds (see :class:`Pending`)."""


class Deferrable:
    """Mixin for a dataclass whose fields named in ``DEFERRED`` are made on first read by a source
    that holds what was already recorded (``source.fill(record)`` sets them with :meth:`settle`)."""

    DEFERRED: tuple[str, ...] = ()

    def __getattr__(self, name: str):
        # Only reached when the field is missing from __dict__ (normal lookup failed).
        if name in type(self).DEFERRED:
            source = self.__dict__.get("_source")
            if source is not None:
                source.fill(self)
                if name in self.__dict__:
                    return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def fill_deferred(self) -> None:
        """Make every deferred field now (nothing when all are made)."""
        source = self.__dict__.get("_source")
        if source is not None and any(name not in self.__dict__ for name in type(self).DEFERRED):
            source.fill(self)

    @classmethod
    def pending_record(cls, source, fields: dict):
        """The record ``cls(**fields)`` with every deferred field left to ``source``, made without
        running ``__init__``. ``fields`` holds every field not in ``DEFERRED``."""
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        record.__dict__["_source"] = source
        return record

    def settle(self, **values) -> None:
        """Set deferred fields (those not set yet) and forget the source once none is missing."""
        for name, value in values.items():
            self.__dict__.setdefault(name, value)
        if all(name in self.__dict__ for name in type(self).DEFERRED):
            self.__dict__.pop("_source", None)

    def __getstate__(self):
        # A source is a live link to the recorders; a copy or a pickle holds the records made.
        self.fill_deferred()
        return {k: v for k, v in self.__dict__.items() if k != "_source"}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)


def deferrable(cls: type) -> type:
    """Class decorator (after ``@dataclass``) for a :class:`Deferrable`: drop the class-level
    defaults of the deferred fields, so that reading a missing one reaches ``__getattr__``
    (``__init__`` keeps its defaults)."""
    for name in cls.DEFERRED:
        if name in cls.__dict__:
            delattr(cls, name)
    return cls


class Fillable:
    """Mixin for a record dataclass whose fields named in ``DEFERRED`` may wait for
    :meth:`hookviz.data.run.Run.fill_details`.

    The dataclass declares a field ``pending: tuple[str, ...] = ()``: the names of the fields
    that wait (empty for a complete record). Each of them holds ``WAITING`` (None, or
    :data:`PENDING`) until it is filled; nothing fills it on read.
    """

    DEFERRED: tuple[str, ...] = ()
    WAITING = None  # what a pending field holds: None, or PENDING (a record users read directly)

    @classmethod
    def from_fields(cls, fields: dict):
        """The record ``cls(**fields)``, made without running ``__init__`` (a run makes one per
        Node); fields left out read their class default."""
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        return record

    @classmethod
    def pending_record(cls, fields: dict):
        """The record ``cls(**fields)`` whose deferred fields that ``fields`` leaves out or gives
        as None are pending: ``WAITING``, and named in ``pending``."""
        record = cls.from_fields(fields)
        waiting = tuple(name for name in cls.DEFERRED if fields.get(name) is None)
        for name in waiting:
            record.__dict__[name] = cls.WAITING
        record.__dict__["pending"] = waiting
        return record

    def fill(self, **values) -> None:
        """Set the pending fields from ``values`` (every one of them must be given); the record is
        then complete (``pending == ()``). Called by :mod:`hookviz.record.details` only."""
        for name in self.pending:
            self.__dict__[name] = values[name]
        self.__dict__["pending"] = ()
