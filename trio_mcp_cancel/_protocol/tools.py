"""Tools: the schema derived from a signature, argument checks, result wrapping.

Pure code with no I/O, used by the dispatcher (:mod:`.dispatch`).
"""

from __future__ import annotations

import copy
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import attrs
import pydantic

from .._work.threads import ThreadLimit
from .content import ToolResult, is_content, json_text, to_content
from .signature import (
    ArgumentsInvalid,
    Output,
    Returns,
    Signature,
    admits_none,
    check_callable,
    context_parameter,
    output_for,
    read_signature,
    returns_for,
    with_context,
)
from .time_limits import time_limit_reason

__all__ = [
    "TaskSupport",
    "Tool",
    "ToolArgumentError",
    "error_result",
    "make_tool",
    "tool_result",
]

logger = logging.getLogger("trio_mcp_cancel.tools")

#: Whether a tool runs as a task (Tasks extension): never, when the client
#: declares the extension, or only as a task (``-32021`` for a client that does not).
TaskSupport = Literal["forbidden", "optional", "required"]


class ToolArgumentError(ArgumentsInvalid):
    """Arguments that do not fit the tool's signature.

    Answered as a tool result with ``isError: true`` (SEP-1303), not as a
    protocol error: a model that called a tool wrongly can read the message
    and try again.  The message names each field that failed by its
    location (``'point.x': Input should be a valid integer``).
    """


class _Once:
    """A flag a frozen :class:`Tool` can set: warn about a tool only once."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False


@attrs.frozen
class Tool:
    """A registered tool: the function, its schemas and how to call it."""

    name: str
    description: str | None
    """``None``: no docstring and none given, so none is sent (a made-up one misleads)."""
    fn: Callable[..., Awaitable[Any]]
    """``fn(ctx, **arguments)``: the function, its context put where it asks for it."""
    input_schema: dict[str, Any]
    params: dict[str, tuple[tuple[type, ...], bool]]
    """A hand-written ``input_schema``'s checks: name -> (accepted Python types, required)."""
    cancellable: bool = True
    """Run inside ``tracked()`` (and, over HTTP, watch for disconnects)."""
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    """Client capabilities the tool needs (``-32021`` when undeclared)."""
    task_support: TaskSupport = "forbidden"
    """Tasks extension: ``"forbidden"``, ``"optional"`` or ``"required"``."""
    output_schema: Mapping[str, Any] | None = None
    """When set, results carry ``structuredContent`` (checked to be an object)."""
    annotations: Mapping[str, Any] | None = None
    """``ToolAnnotations`` hints (``readOnlyHint``, ``destructiveHint``, ...)."""
    title: str | None = None
    extra_arguments: bool = False
    """Arguments outside ``params`` are passed on (the function takes ``**kwargs``)."""
    meta: Mapping[str, Any] | None = None
    before_task: Callable[..., Awaitable[Any]] | None = None
    """Tasks extension: ``async (ctx, **arguments)`` run before a task is created; an
    ``InputRequired`` it returns is the answer (MRTR first), ``None`` creates the task."""
    signature: Signature | None = None
    """The derived schema's validator (``None`` for a hand-written ``input_schema``)."""
    output: Output | None = None
    """The return annotation's structured type (model, dataclass, ``TypedDict``)."""
    returns: Returns | None = None
    """Any other return annotation JSON cannot carry as is (``datetime``, ``UUID``, ...)."""
    none_ok: bool = True
    """The return annotation admits ``None``; a ``None`` from a tool that said ``-> str``
    is logged once (a forgotten ``return``)."""
    time_limit: float | None = None
    """Seconds a run may take: then the flag, the hard cancel a grace period later
    (:mod:`.time_limits`); ``None``: only the server-wide limit applies."""
    time_limit_reason: str | None = None
    """The cancel reason at the limit (made once, at registration)."""
    icons: tuple[dict[str, Any], ...] = ()
    """The tool's ``icons`` (checked at registration, :mod:`.metadata`)."""
    _warned: _Once = attrs.field(factory=_Once, eq=False, repr=False)

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            described["description"] = self.description
        described["inputSchema"] = self.input_schema
        if self.title is not None:
            described["title"] = self.title
        if self.icons:
            described["icons"] = [dict(icon) for icon in self.icons]
        if self.output_schema is not None:
            described["outputSchema"] = dict(self.output_schema)
        if self.annotations:
            described["annotations"] = dict(self.annotations)
        if self.meta:
            described["_meta"] = dict(self.meta)
        return described

    def bind(self, arguments: object) -> dict[str, Any]:
        """*arguments* validated and converted; raise :class:`ToolArgumentError`.

        A derived schema validates with the tool's pydantic validator (built
        once, at registration); a hand-written one checks the top-level
        JSON types, required and unknown names, as before.
        """
        if self.signature is not None:
            try:
                return self.signature.validate(arguments)
            except ArgumentsInvalid as exc:
                raise ToolArgumentError(str(exc)) from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ToolArgumentError("arguments must be an object")
        unknown = sorted(set(arguments) - set(self.params))
        if unknown and not self.extra_arguments:
            raise ToolArgumentError(f"unknown argument {unknown[0]!r}"[:300])
        for name, (types, required) in self.params.items():
            if name not in arguments:
                if required:
                    raise ToolArgumentError(f"missing argument {name!r}")
                continue
            value = arguments[name]
            if types and (
                not isinstance(value, types) or (bool not in types and isinstance(value, bool))
            ):
                expected = self.input_schema["properties"][name]["type"]
                raise ToolArgumentError(f"{name!r} must be {expected}")
        return arguments

    def result(self, value: object) -> dict[str, Any]:
        """The ``CallToolResult`` for the tool's return *value* (see :func:`tool_result`).

        With a structured return annotation, the value is validated against
        it and its JSON form is the ``structuredContent``.
        """
        if value is None and not self.none_ok and not self._warned.done:
            self._warned.done = True
            logger.warning(
                "tool %r returned None although its return annotation does not allow it "
                "(a missing return?); it answers empty content",
                self.name,
            )
        if self.output is not None and not (
            value is None or isinstance(value, ToolResult) or is_content(value)
        ):
            value = self.output.structured(value)
        elif self.returns is not None and not (
            value is None or isinstance(value, (str, ToolResult)) or is_content(value)
        ):
            value = self.returns.to_json(value)
        result = tool_result(value, structured=self.output_schema is not None)
        if self.output_schema is not None and not result["isError"]:
            if not isinstance(result.get("structuredContent"), dict):
                raise TypeError(f"tool {self.name!r} has an output schema: return a dict")
        return result


_TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: An ``x-mcp-header`` value becomes ``Mcp-Param-<value>``: keep it a plain token.
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
_SCHEMA_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _doc_arguments(doc: str | None) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section of a docstring."""
    found: dict[str, str] = {}
    if not doc:
        return found
    lines = doc.splitlines()
    inside = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            inside, current = True, None
            continue
        if not inside:
            continue
        if not stripped:
            current = None
            continue
        if not line.startswith((" ", "\t")):
            break  # the next section
        head, sep, text = stripped.partition(":")
        name = head.split("(")[0].strip()
        if sep and name.isidentifier() and " " not in head.strip().split("(")[0]:
            current = name
            found[name] = text.strip()
        elif current is not None:
            found[current] = f"{found[current]} {stripped}".strip()
    return found


def _explicit_params(
    name: str, fn: Callable[..., Any], schema: Mapping[str, Any]
) -> tuple[dict[str, tuple[tuple[type, ...], bool]], bool]:
    """What :meth:`Tool.bind` checks for a hand-written *schema*, and whether extras pass."""
    if schema.get("type") != "object":
        raise ValueError(f"tool {name!r}: inputSchema must have type 'object'")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise ValueError(f"tool {name!r}: inputSchema properties/required are malformed")
    context = context_parameter(fn, f"tool {name!r}")
    parameters = [p for p in inspect.signature(fn).parameters.values() if p.name != context]
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters)
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = sorted(set(properties) - named)
    if missing and not takes_kwargs:
        raise TypeError(f"tool {name!r}: the function takes no parameter {missing[0]!r}")
    _check_headers(name, properties)
    params: dict[str, tuple[tuple[type, ...], bool]] = {}
    for prop, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        types = _SCHEMA_TYPES.get(kind, ()) if isinstance(kind, str) else ()
        params[prop] = (types, prop in required)
    extras = schema.get("additionalProperties", True) is not False and takes_kwargs
    return params, extras


def _check_headers(name: str, properties: Mapping[str, Any]) -> None:
    """Each ``x-mcp-header`` (SEP-2243) names a plain header token."""
    for prop, spec in properties.items():
        header = spec.get("x-mcp-header") if isinstance(spec, Mapping) else None
        if header is not None and not (isinstance(header, str) and _HEADER_NAME.fullmatch(header)):
            raise ValueError(f"tool {name!r}: x-mcp-header of {prop!r} must be a header name")


def make_tool(
    fn: Callable[..., Awaitable[Any]],
    name: str,
    description: str | None,
    cancellable: bool,
    client_capabilities: Mapping[str, Any] | None = None,
    task_support: TaskSupport = "forbidden",
    *,
    input_schema: Mapping[str, Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
    annotations: Mapping[str, Any] | None = None,
    title: str | None = None,
    meta: Mapping[str, Any] | None = None,
    before_task: Callable[..., Awaitable[Any]] | None = None,
    threads: ThreadLimit | None = None,
    lax_arguments: bool = False,
    time_limit: float | None = None,
    icons: tuple[dict[str, Any], ...] = (),
) -> Tool:
    """Build a :class:`Tool` from a function: ``async def`` or a plain ``def``.

    The context is the parameter annotated ``Context`` (any position; an
    ``ctx`` unannotated or ``Any`` too), or none.  A plain function is a *sync tool*:
    it runs in a worker thread (:func:`.signature.with_context`), so
    blocking code never stalls the event loop; *threads* bounds how many it
    holds (default: a limit of its own, 40).

    Without *input_schema* the other parameters' type hints give the schema
    (JSON Schema 2020-12 through pydantic: ``$defs`` for models, enums and
    dataclasses; ``additionalProperties: false``) and the validator that
    converts the arguments; descriptions come from ``Annotated[T,
    "description"]``, ``Field(description=...)`` or the docstring's
    ``Args:`` section; a function without a docstring (and no
    *description*) has no description, as in the official SDK: a made-up
    one would tell the model nothing it could use.  Arguments are validated
    strictly (what the schema says is what passes) unless *lax_arguments*:
    then pydantic's lax mode converts as the official SDK does (``"1"`` and
    ``2.0`` are accepted for an ``int``).  A type pydantic cannot express is
    a ``TypeError`` here.  A given *input_schema* is sent exactly as written (``$schema``,
    ``$defs``, ``additionalProperties``, ...) and only its top level is
    checked.  Without *output_schema*, a return annotation that is a
    pydantic model, a dataclass or a ``TypedDict`` gives the
    ``outputSchema`` and the result's ``structuredContent``.
    """
    check_callable(fn, f"tool {name!r}")
    if not _TOOL_NAME.fullmatch(name):
        # MCP 2025-11-25 "Tool Names": clients may refuse (or mangle) any other name.
        raise ValueError(f"tool name {name!r}: use 1-128 of A-Z a-z 0-9 _ - .")
    what = f"tool {name!r}"
    raw_doc = inspect.getdoc(fn)
    doc = description if description is not None else (_summary(raw_doc) or None)
    if output_schema is not None and output_schema.get("type") != "object":
        raise ValueError(f"tool {name!r}: outputSchema must have type 'object'")
    # A structured return annotation converts the value; its schema is shown unless given.
    output = output_for(fn, what)
    if output is not None and output_schema is None:
        output_schema = output.schema
    extras: dict[str, Any] = dict(
        cancellable=cancellable,
        client_capabilities=dict(client_capabilities or {}),
        output_schema=None if output_schema is None else dict(output_schema),
        annotations=None if annotations is None else dict(annotations),
        title=title,
        meta=None if meta is None else dict(meta),
        task_support=task_support,
        before_task=before_task,
        output=output,
        returns=None if output is not None else returns_for(fn, what),
        none_ok=admits_none(fn, what),
        time_limit=time_limit,
        time_limit_reason=None if time_limit is None else time_limit_reason(time_limit),
        icons=icons,
    )
    if input_schema is not None:
        schema = copy.deepcopy(dict(input_schema))
        checks, extra_arguments = _explicit_params(name, fn, schema)
        run = with_context(fn, context_parameter(fn, what), f"tool {name}", threads)
        return Tool(name, doc, run, schema, checks, extra_arguments=extra_arguments, **extras)
    signature = read_signature(
        fn,
        what,
        mode="lax" if lax_arguments else "strict-json",
        descriptions=_doc_arguments(raw_doc),
    )
    _check_headers(name, signature.schema["properties"])
    run = with_context(fn, signature, f"tool {name}", threads)
    params: dict[str, tuple[tuple[type, ...], bool]] = {
        arg: ((), arg in signature.required) for arg in signature.names
    }
    return Tool(name, doc, run, signature.schema, params, signature=signature, **extras)


def _summary(doc: str | None) -> str | None:
    """A docstring without its ``Args:`` section (that goes into the schema)."""
    if not doc:
        return doc
    kept: list[str] = []
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:", "Parameters:"):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def tool_result(value: object, *, structured: bool = False) -> dict[str, Any]:
    """Wrap a tool's return value as a ``CallToolResult``.

    ``None`` is no content; a string is one text block; a content object
    (:class:`~.content.Text`, :class:`~.content.Image`, ...) or a list of
    them is that content; a :class:`~.content.ToolResult` is taken as
    written; anything else is JSON text, and a ``dict`` is also the
    ``structuredContent`` (*structured*: a tool with an output schema, whose
    plain ``dict`` result is that, rendered as JSON text for older
    clients).  A value that is not strict JSON raises here, inside the
    tool's error handling.
    """
    if isinstance(value, ToolResult):
        return value.to_wire()
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    if is_content(value):
        return {"content": [to_content(value)], "isError": False}
    if isinstance(value, list) and value and all(is_content(item) for item in value):
        return {"content": [to_content(item) for item in value], "isError": False}
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")  # a model without a structured annotation
    text = json_text(value)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict) or structured:
        result["structuredContent"] = value
    return result


def error_result(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` that reports a failure to the model (``isError``)."""
    return {"content": [{"type": "text", "text": text[:1000]}], "isError": True}
