"""A griffe extension: every parameter of hookviz's public API is documented, or the docs build warns.

griffe warns about a documented parameter the signature lacks, not about a parameter the docstring
leaves out. This extension does the other half, on every name in ``hookviz.__all__``: for a function,
each parameter must be in its docstring's ``Args:``; for a class, each parameter of ``__init__`` in
the class's (or ``__init__``'s) ``Args:``, each dataclass field in ``Attributes:`` or a docstring of
its own, and every public method as a function. Each gap is one warning on the ``mkdocs`` logger, so
``mkdocs build --strict`` fails on it. Loaded by mkdocstrings (``extensions:`` in mkdocs.yml).
"""

from __future__ import annotations

import logging
from typing import Any

import griffe

logger = logging.getLogger("mkdocs.plugins.hookviz.parameters")
PACKAGE = "hookviz"
STYLE = "google"


def _sections(obj: griffe.Object) -> list[griffe.DocstringSection]:
    if obj.docstring is None:
        return []
    # warnings=False: mkdocstrings parses the same docstring again when it renders it and warns then.
    return griffe.parse(obj.docstring, STYLE, warnings=False, returns_named_value=False)


def _documented(obj: griffe.Object, *kinds: griffe.DocstringSectionKind) -> set[str]:
    """Names listed in the ``kinds`` sections of ``obj``'s docstring, stars stripped (``*args``)."""
    # One name per item: griffe reads ``a, b: ...`` as the name ``a,`` of type ``b``, so ``b`` stays
    # undocumented here as it does on the page.
    sections = [section for section in _sections(obj) if section.kind in kinds]
    return {item.name.lstrip("*") for section in sections for item in section.value}


def _parameters(function: griffe.Function) -> list[str]:
    return [
        parameter.name
        for parameter in function.parameters
        if not (parameter.name in ("self", "cls") and parameter is function.parameters[0])
    ]


def _where(obj: griffe.Object) -> str:
    return f"{obj.relative_filepath}:{obj.lineno or 1}"


def _fields(cls: griffe.Class) -> list[str]:
    """A dataclass's own fields: its annotated attributes, but ``ClassVar``s and private names.

    Read from the class body, since griffe's dataclasses extension may make ``__init__`` after this
    extension runs.
    """
    return [
        name
        for name, member in cls.members.items()
        if member.is_attribute
        and not member.is_alias
        and member.annotation is not None
        and "property" not in member.labels
        and not str(member.annotation).startswith(("ClassVar", "typing.ClassVar"))
        and not name.startswith("_")
    ]


PARAMETERS = (griffe.DocstringSectionKind.parameters, griffe.DocstringSectionKind.other_parameters)
ATTRIBUTES = (griffe.DocstringSectionKind.attributes,)


def _check_function(function: griffe.Function, public_name: str, documented: set[str] | None = None) -> int:
    """Warn once per parameter of ``function`` its docstring does not document; return the count."""
    if function.docstring is None and documented is None:
        logger.warning("%s: %s has no docstring (%s)", PACKAGE, public_name, _where(function))
        return 1
    documented = (documented or set()) | _documented(function, *PARAMETERS)
    missing = [name for name in _parameters(function) if name not in documented]
    for name in missing:
        logger.warning(
            "%s: parameter '%s' of %s is not documented: add it to the docstring's Args: section (%s)",
            PACKAGE,
            name,
            public_name,
            _where(function),
        )
    return len(missing)


def _check_class(cls: griffe.Class, public_name: str) -> int:
    if cls.docstring is None:
        logger.warning("%s: %s has no docstring (%s)", PACKAGE, public_name, _where(cls))
        return 1
    gaps = 0
    own = cls.members
    if "dataclass" in cls.labels:
        # A record: its fields are documented as attributes, in the class docstring or each with a
        # docstring of its own.
        documented = _documented(cls, *PARAMETERS, *ATTRIBUTES)
        for name in _fields(cls):
            if name not in documented and (name not in own or own[name].docstring is None):
                logger.warning(
                    "%s: field '%s' of %s is not documented: add it to the class docstring's "
                    "Attributes: section or give it a docstring (%s)",
                    PACKAGE,
                    name,
                    public_name,
                    _where(cls),
                )
                gaps += 1
    init = own.get("__init__")
    if "dataclass" not in cls.labels and init is not None and not init.is_alias and init.is_function:
        gaps += _check_function(init, f"{public_name}()", documented=_documented(cls, *PARAMETERS))
    for name, member in own.items():
        if name.startswith("_") or member.is_alias or not member.is_function:
            continue
        gaps += _check_function(member, f"{public_name}.{name}")
    return gaps


class DocumentedParameters(griffe.Extension):
    """Check hookviz's public API once griffe has loaded the package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        exports = [str(name) for name in (pkg.exports or [])]
        if not exports:
            logger.warning("%s: no __all__ found in %s", PACKAGE, _where(pkg))
            return
        for name in exports:
            if name not in pkg.members:
                logger.warning(
                    "%s: '%s' is in __all__ but not defined or imported in %s (an import under "
                    "`if TYPE_CHECKING:` lets the docs see a name the module makes lazily)",
                    PACKAGE,
                    name,
                    _where(pkg),
                )
                continue
            try:
                target = pkg.members[name].final_target if pkg.members[name].is_alias else pkg.members[name]
            except griffe.AliasResolutionError as error:
                logger.warning("%s: %s cannot be resolved: %s", PACKAGE, name, error)
                continue
            public_name = f"{PACKAGE}.{name}"
            if target.is_class:
                _check_class(target, public_name)
            elif target.is_function:
                _check_function(target, public_name)
