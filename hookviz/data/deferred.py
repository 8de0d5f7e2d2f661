"""Fields of a record that are filled on first read.

A record made by a run with ``details="lazy"`` (the default of :class:`hookviz.Session`) holds only
what every view needs (a gradient's shape, dtype and 2-norm); the rest (values, min, max, mean,
histogram, zero fraction, forward values) is left out of its ``__dict__`` and filled, for the whole
run at once, the first time any of it is read (:class:`hookviz.record.details.Details`).

The mechanism is Python's ``__getattr__``, which runs only when normal lookup finds nothing: the
deferred fields have no class-level default (:func:`deferrable` removes them), so reading a filled
field costs nothing extra and reading a missing one asks the record's source.
"""

from __future__ import annotations


class Deferrable:
    """Mixin for a dataclass whose fields named in ``DEFERRED`` may be filled later."""

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

    @property
    def pending(self) -> bool:
        """True while some deferred field has not been filled yet (reading this fills nothing)."""
        return self.__dict__.get("_source") is not None and any(
            name not in self.__dict__ for name in type(self).DEFERRED
        )

    def fill_deferred(self) -> None:
        """Fill every deferred field now (nothing when none is missing)."""
        if self.pending:
            self.__dict__["_source"].fill(self)

    def defer(self, names, source) -> None:
        """Leave ``names`` out until ``source.fill(record)`` sets them (see :meth:`settle`)."""
        for name in names:
            self.__dict__.pop(name, None)
        self.__dict__["_source"] = source

    @classmethod
    def pending_record(cls, source, fields: dict):
        """The record ``cls(**fields)`` with every other deferred field left to ``source``: what
        ``__init__`` then :meth:`defer` make, without running them (a lazy run makes one per
        gradient). ``fields`` holds every field not in ``DEFERRED``."""
        record = cls.from_fields(fields)
        record.__dict__["_source"] = source
        return record

    @classmethod
    def from_fields(cls, fields: dict):
        """The record ``cls(**fields)``, made without running ``__init__`` (a run makes one per
        Node): ``fields`` holds every field."""
        record = cls.__new__(cls)
        record.__dict__.update(fields)
        return record

    def settle(self, **values) -> None:
        """Set deferred fields (those not set yet) and forget the source once none is missing."""
        for name, value in values.items():
            self.__dict__.setdefault(name, value)
        if all(name in self.__dict__ for name in type(self).DEFERRED):
            self.__dict__.pop("_source", None)

    def __getstate__(self):
        # A source is a live link to a session; a copy or a pickle is of the values as they are now.
        self.fill_deferred()
        return {k: v for k, v in self.__dict__.items() if k != "_source"}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)


def deferrable(cls: type) -> type:
    """Class decorator (after ``@dataclass``): drop the class-level defaults of the deferred
    fields, so that reading a missing one reaches ``__getattr__`` (``__init__`` keeps its
    defaults)."""
    for name in cls.DEFERRED:
        if name in cls.__dict__:
            delattr(cls, name)
    return cls
