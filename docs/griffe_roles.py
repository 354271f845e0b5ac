"""Sphinx cross-reference roles in flyviz's docstrings, made into links on the API pages.

flyviz's numpydoc docstrings name other objects with Sphinx roles (``:func:`load```,
``:class:`~flyviz.record.recording.Recording```, ``:meth:`...```, ``:attr:`...```, ...), which
mkdocstrings does not interpret: the pages showed the markup itself. This griffe extension
(``extensions:`` in mkdocs.yml's mkdocstrings options) rewrites each role, before the docstring
is rendered, as an optional cross-reference of mkdocs-autorefs, the form mkdocstrings uses for
the names in signatures: a link where the target is rendered on the site, inline code (titled
with the full name) where it is not, and never a warning, so ``mkdocs build --strict`` holds.

A name is looked up as Sphinx looks it up: in the scope of the object whose docstring it is in
(its members, then its parents', then the module's imports); a dotted name by its first part.
``~`` shows only the last part, ``!`` suppresses the link, ``text <target>`` gives the text.
A name that cannot be looked up (a parameter, say) becomes inline code without a link.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: The Python domain's roles (``:func:`` or ``:py:func:``); other roles are left as written.
ROLES = ("func", "meth", "class", "attr", "mod", "data", "exc", "obj", "const", "type")

#: Roles whose text Sphinx ends with ``()`` (its default ``add_function_parentheses``).
CALLABLE_ROLES = frozenset({"func", "meth"})

ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<body>[^`]+)`")
EXPLICIT = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)


def resolve(scope: griffe.Object | griffe.Alias, name: str) -> str | None:
    """The full path of ``name`` as seen from ``scope``'s docstring, or ``None``."""
    first, dot, rest = name.partition(".")
    try:
        head = scope.resolve(first)
    except (griffe.NameResolutionError, griffe.AliasResolutionError):
        # A dotted name that is not in scope is taken as already full (``xarray.Dataset``).
        return name if dot else None
    return f"{head}.{rest}" if dot else head


def rewrite(text: str, scope: griffe.Object | griffe.Alias) -> str:
    """``text`` with every Python-domain role replaced by an optional autorefs reference."""

    def replace(match: re.Match[str]) -> str:
        role, body = match["role"], " ".join(match["body"].split())
        explicit = EXPLICIT.match(body)
        if explicit:
            title, target = explicit["title"], explicit["target"].strip()
        else:
            title = target = body
        no_link = target.startswith("!")
        target = target.lstrip("!")
        short = target.startswith("~")
        target = target.lstrip("~").lstrip(".")
        if not explicit:
            title = target.rsplit(".", 1)[-1] if short else target
            if role in CALLABLE_ROLES and not title.endswith(")"):
                title += "()"
        target = target.removesuffix("()")
        code = f"`{title}`"
        path = None if no_link else resolve(scope, target)
        if path is None:
            return code
        return f'<autoref identifier="{path}" optional>{code}</autoref>'

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrites the Sphinx roles of every docstring in a loaded package (see the module)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:  # noqa: ARG002
        self._visit(pkg)

    def _visit(self, obj: griffe.Object) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = rewrite(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias and isinstance(member, griffe.Object):
                self._visit(member)
