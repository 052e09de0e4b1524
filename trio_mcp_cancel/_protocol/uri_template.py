"""URI templates (RFC 6570, the part MCP hosts use), matched so a value cannot escape.

RFC 6570 only defines expansion; a server needs the inverse, ``resources/read``
of a URI giving the template's variables.  The expressions understood are
the ones MCP servers and the official SDKs use:

* ``{name}`` (simple): one non-empty value with no ``/``, ``?`` or ``#``;
  percent-decoded, it must hold no ``/`` or ``\\`` and not be ``.`` or
  ``..``, so ``file:///docs/{name}`` only ever names a file in ``/docs``;
* ``{/name}``: ``/`` and then a simple value (a path segment);
* ``{+name}`` (reserved expansion): a non-empty value that may span path
  segments (``a/b/c.txt``) but never holds a ``..`` segment, a ``\\`` or a
  leading ``/`` (an absolute path would replace the base it is joined to);
* ``{?a,b}`` (form-style query), last in the template: each parameter is
  optional and their order free (``?b=1&a=2``); one absent is left out, so
  the reader's default applies; unknown parameters are ignored, and the
  first of a repeated one counts (as the official Python SDK matches them).
  A value may hold ``/`` but never a ``..`` segment.

Every check is made on the value as the reader receives it (decoded once)
*and* on every further decoding of it, so ``%2E%2E``, ``%2e%2E`` and
double encodings such as ``%252F`` are refused like the plain characters:
a reader that decodes again (or hands the value to a library that does)
still cannot be walked out of its directory.  A NUL is refused everywhere,
as is a value that is not percent-encoded UTF-8.  A refused value is an
error (:class:`UnsafeValue`), not a mismatch: no later, looser template is
tried for it.

What a template may not say is refused when it is made
(:class:`TemplateError`): unbalanced braces, an operator or modifier
outside the list above (``{.ext}``, ``{;p}``, ``{#f}``, ``{var*}``,
``{var:3}``), a name that is not a Python identifier (variables are the
reader's parameters), a repeated name, two variables with nothing between
them, more than one ``{+name}``, or ``{?...}`` anywhere but at the end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final, Literal
from urllib.parse import unquote

import attrs

__all__ = ["TemplateError", "UnsafeValue", "UriTemplate"]

Kind = Literal["simple", "reserved", "query"]

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EXPRESSION: Final = re.compile(r"\{([^{}]*)\}|[{}]")
#: The first character of an expression that is an RFC 6570 operator.
_OPERATORS: Final = frozenset("+#./;?&=,!@|")
#: What each kind of path variable's raw value never holds.
_SIMPLE_STOPS: Final = "/?#"
_RESERVED_STOPS: Final = "?#"
#: How many decodings of one value are checked: each more is another layer
#: a reader might peel off; a value still changing after this many is refused.
_MAX_DECODES: Final = 4
_SEPARATORS: Final = re.compile(r"[/\\]")


class TemplateError(ValueError):
    """A URI template this server cannot match (said when it is registered)."""


class UnsafeValue(ValueError):
    """A URI matched a template, but a variable's value would escape it."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"template variable {name!r} {problem}")
        self.name = name


@attrs.frozen
class _Variable:
    name: str
    kind: Kind
    stops: str
    """Characters its raw value never holds (it ends before them)."""


#: A parsed template path: literal text and variables, never two variables in a row.
_Atom = str | _Variable


@attrs.frozen
class UriTemplate:
    """A parsed template: :meth:`parse` it, then :meth:`match` URIs against it.

    Matching is one linear scan with no backtracking, whatever the URI: the
    *pivot* (the ``{+name}`` variable, else the last one) takes what the
    others leave; the variables before it end at the first occurrence of
    the literal after them, those after it start at the last occurrence of
    the literal before them (the official Python SDK scans a template with
    a ``{+name}`` the same way).
    """

    template: str
    kinds: Mapping[str, Kind]
    """Every variable and how it is matched and checked, in template order."""
    atoms: tuple[_Atom, ...] = attrs.field(repr=False)
    pivot: int | None = attrs.field(repr=False)
    """The index in :attr:`atoms` of the variable matched last (``None``: no variable)."""
    query: tuple[str, ...] = ()
    """The ``{?...}`` parameters (a URI's query is only read when there are some)."""

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(self.kinds)

    @classmethod
    def parse(cls, template: str) -> UriTemplate:
        """The template *template*, or :class:`TemplateError` saying what is wrong."""
        atoms: list[_Atom] = []
        kinds: dict[str, Kind] = {}
        query: tuple[str, ...] = ()
        position, pivot, reserved = 0, None, False

        def refuse(why: str) -> TemplateError:
            return TemplateError(f"URI template {template!r}: {why}")

        for found in _EXPRESSION.finditer(template):
            literal = template[position : found.start()]
            position = found.end()
            body = found.group(1)
            if body is None:
                raise refuse(f"unmatched {found.group()!r} at offset {found.start()}")
            if query:
                raise refuse("{?...} must come last")
            if literal:
                atoms.append(literal)
            operator = body[:1] if body[:1] in _OPERATORS else ""
            names = body[len(operator) :].split(",")
            for name in names:
                if not _NAME.match(name):
                    raise refuse(
                        f"{{{body}}}: {name!r} is not a variable name (a Python identifier;"
                        " modifiers such as * and :N are not supported)"
                    )
                if name in kinds or name in query:
                    raise refuse(f"repeats the variable {name!r}")
            if operator == "?":
                query = tuple(names)
                continue
            if operator not in ("", "+", "/"):
                raise refuse(
                    f"{{{body}}}: the operator {operator!r} is not supported"
                    " (use {name}, {/name}, {+name} or {?a,b})"
                )
            if len(names) != 1:
                raise refuse(f"{{{body}}}: one variable per expression (except {{?a,b}})")
            if operator == "/":  # "/" and a simple value: one literal with what precedes
                if atoms and isinstance(atoms[-1], str):
                    atoms[-1] += "/"
                else:
                    atoms.append("/")
            if atoms and isinstance(atoms[-1], _Variable):
                raise refuse(f"{{{body}}} follows another variable with nothing between them")
            (name,) = names
            if operator == "+":
                if reserved:
                    raise refuse("at most one {+name} (two could split a path either way)")
                kinds[name] = "reserved"
                atoms.append(_Variable(name, "reserved", _RESERVED_STOPS))
            else:
                kinds[name] = "simple"
                atoms.append(_Variable(name, "simple", _SIMPLE_STOPS))
            if not reserved:  # the {+name} variable, else the last one
                pivot = len(atoms) - 1
            reserved = reserved or operator == "+"
        tail = template[position:]
        if query and tail:
            raise refuse("{?...} must come last")
        if tail:
            atoms.append(tail)
        if query and ("?" in template[: template.index("{?")] or "#" in template):
            raise refuse("a template with {?...} cannot also hold a literal '?' or '#'")
        kinds.update(dict.fromkeys(query, "query"))
        return cls(template, kinds, tuple(atoms), pivot, query)

    def match(self, uri: str) -> dict[str, str] | None:
        """The variables of *uri*, decoded; ``None`` when it does not match.

        :class:`UnsafeValue` when it matches but a value would escape the
        template (see the module docstring): the caller refuses the URI.
        """
        path, query = uri, ""
        if self.query:
            path, _, query = uri.partition("#")[0].partition("?")
        raws = self._scan(path)
        if raws is None:
            return None
        kinds = self.kinds
        values = {name: _checked(name, raws[name], kinds[name]) for name in kinds if name in raws}
        if query:
            for pair in query.split("&"):
                name, _, raw = pair.partition("=")
                # Names are not decoded: expansion never encodes them, so
                # ``%61=x`` cannot stand in for ``a``.
                if name in self.query and name not in values:
                    values[name] = _checked(name, raw, "query")
        return values

    def _scan(self, path: str) -> dict[str, str] | None:
        """The raw values of the path variables in *path* (``None``: no match)."""
        atoms, pivot = self.atoms, self.pivot
        if pivot is None:  # only literal text (and maybe a {?...} already split off)
            return {} if path == "".join(a for a in atoms if isinstance(a, str)) else None
        raws: dict[str, str] = {}
        # After the pivot, from the right: each variable starts after the
        # last occurrence of the literal before it.
        end = len(path)
        for index in range(len(atoms) - 1, pivot, -1):
            atom = atoms[index]
            if isinstance(atom, str):
                if not path.endswith(atom, 0, end):
                    return None
                end -= len(atom)
                continue
            before = atoms[index - 1]  # a literal: variables never touch
            assert isinstance(before, str)
            start = path.rfind(before, 0, end - 1) + len(before)
            if start < len(before) or not _fits(path, start, end, atom.stops):
                return None
            raws[atom.name] = path[start:end]
            end = start
        # Before the pivot, from the left: each variable ends at the first
        # occurrence of the literal after it (never past where the right part begins).
        start = 0
        for index in range(pivot):
            atom = atoms[index]
            if isinstance(atom, str):
                if not path.startswith(atom, start, end):
                    return None
                start += len(atom)
                continue
            after = atoms[index + 1]
            assert isinstance(after, str)
            stop = path.find(after, start + 1, end)
            if stop < 0 or not _fits(path, start, stop, atom.stops):
                return None
            raws[atom.name] = path[start:stop]
            start = stop
        variable = atoms[pivot]
        assert isinstance(variable, _Variable)
        if not _fits(path, start, end, variable.stops):
            return None
        raws[variable.name] = path[start:end]
        return raws


def _fits(path: str, start: int, end: int, stops: str) -> bool:
    """Whether ``path[start:end]`` is a non-empty value holding none of *stops*."""
    if end <= start:
        return False
    value = path[start:end]
    return not any(stop in value for stop in stops)


def _checked(name: str, raw: str, kind: Kind) -> str:
    """*raw* decoded once, if neither it nor any further decoding of it is unsafe."""
    try:
        value = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise UnsafeValue(name, "is not percent-encoded UTF-8") from None
    layer = value
    for _ in range(_MAX_DECODES):
        problem = _problem(layer, kind)
        if problem is not None:
            raise UnsafeValue(name, problem)
        deeper = unquote(layer)
        if deeper == layer:
            return value
        layer = deeper
    raise UnsafeValue(name, "is percent-encoded too many times")


def _problem(value: str, kind: Kind) -> str | None:
    """Why *value* (one decoding) may not be handed to a reader, if it may not."""
    if "\x00" in value:
        return "may not contain a NUL character"
    if kind == "simple":
        if "/" in value or "\\" in value:
            return "may not contain '/' or '\\' (a {+name} variable may span path segments)"
        if value in (".", ".."):
            return f"may not be {value!r}"
        return None
    if kind == "reserved":
        if "\\" in value:
            return "may not contain '\\'"
        if value.startswith("/"):
            return "may not be an absolute path"
    if ".." in _SEPARATORS.split(value):
        return "may not contain a '..' segment"
    return None
