"""A griffe extension: hookviz's Sphinx-style references in docstrings become checked links.

hookviz's docstrings name other objects as ``:class:`Run```, ``:meth:`fill_details```,
``:func:`~hookviz.errors.unknown_name```. Rendered as they are they read as raw markup, and nothing
notices one that names an object that does not exist (a rename, a split module). This extension
resolves each reference where the docstring stands (its module's and class's names, then a dotted
path from the package) and:

- resolved: writes an optional autorefs link, a link when the reference pages render the target,
  plain code when they do not (a private helper's docs are the source, not the site); a module
  (``:mod:``), which a docstring names to send the reader there, gets a required link: autorefs
  warns when no page of the site renders it;
- unresolved: logs a warning on the ``mkdocs`` logger, so ``mkdocs build --strict`` fails.

A docstring's pointer to its own module's notes ("see the module docstring", "(module docstring)")
becomes a required link to that module too: on the site there is no "module docstring" to scroll
to, only the module's section on a reference page.

``~`` shows only the last part of the name, as in Sphinx. Loaded by mkdocstrings (mkdocs.yml).
"""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import griffe

logger = logging.getLogger("mkdocs.plugins.hookviz.crossrefs")
PACKAGE = "hookviz"
MODULE_NOTES = re.compile(r"(?P<see>see )?(?P<the>the )?module docstring")
ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):`(?P<tilde>~?)(?P<name>[\w.]+)(?:\(\))?`")


def _lookup(collection: griffe.ModulesCollection, path: str) -> griffe.Object | griffe.Alias | None:
    try:
        return collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError):
        return None


def _resolve(obj: griffe.Object, name: str, collection: griffe.ModulesCollection) -> str | None:
    """The full path ``name`` means in ``obj``'s docstring, or None when it names nothing.

    Not ``griffe.Object.resolve``: it climbs to parent packages, where ``hookviz`` would lend every
    public name to every docstring.
    """
    if name.split(".")[0] == PACKAGE:
        return name if _lookup(collection, name) is not None else None
    first, _, rest = name.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        # Python's scopes, as Sphinx reads them: the object's own members and its class's
        # (``:meth:`run``` in Session), then its module's names; never a parent package's.
        if first in scope.members:
            found = _lookup(collection, f"{scope.path}.{name}")
            if found is not None:
                return found.path if not rest else f"{scope.path}.{name}"
        scope = None if scope.is_module else scope.parent
    return None


def _rewrite(obj: griffe.Object, collection: griffe.ModulesCollection) -> None:
    def link(match: re.Match) -> str:
        name = match.group("name")
        target = _resolve(obj, name, collection)
        shown = name.rsplit(".", 1)[-1] if match.group("tilde") else name
        if target is None:
            logger.warning(
                "%s: the docstring of %s refers to %s, which names no object (%s:%s)",
                PACKAGE,
                obj.path,
                match.group(0),
                obj.relative_filepath,
                obj.lineno or 1,
            )
            return f"`{shown}`"
        code = f"<code>{html.escape(shown)}</code>"
        # A module of hookviz's own, not one a module imports (``:mod:`ast``` is Python's).
        required = match.group(0).startswith(":mod:") and not _lookup(collection, target).is_alias
        return f'<autoref identifier="{html.escape(target)}"{"" if required else " optional"}>{code}</autoref>'

    module = obj
    while not module.is_module:
        module = module.parent
    def notes(match: re.Match) -> str:
        pointer = "see" if match.group("see") or not match.group("the") else "the notes of"
        return f"{pointer} :mod:`{module.path}`"

    text = MODULE_NOTES.sub(notes, obj.docstring.value)
    obj.docstring.value = ROLE.sub(link, text)


class SphinxReferences(griffe.Extension):
    """Rewrite and check every reference in the package's docstrings once griffe has loaded it."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != PACKAGE:
            return
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                _rewrite(obj, loader.modules_collection)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
