"""Tools: the schema derived from a signature, argument checks, result wrapping.

Pure code with no I/O, used by the dispatcher (:mod:`.dispatch`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, get_type_hints

import attrs

from .._core.threads import run_sync
from . import jsonrpc

__all__ = ["Tool", "ToolArgumentError", "make_tool", "tool_result"]

_JSON_TYPES: Final[dict[Any, tuple[str, tuple[type, ...]]]] = {
    int: ("integer", (int,)),
    float: ("number", (int, float)),
    str: ("string", (str,)),
    bool: ("boolean", (bool,)),
    list: ("array", (list,)),
    dict: ("object", (dict,)),
}


class ToolArgumentError(ValueError):
    """Arguments that do not fit the tool's signature.

    Answered as a tool result with ``isError: true`` (SEP-1303), not as a
    protocol error: a model that called a tool wrongly can read the message
    and try again.
    """


@attrs.frozen
class Tool:
    """A registered tool: the function and the schema derived from its signature."""

    name: str
    description: str
    fn: Callable[..., Awaitable[Any]]
    input_schema: dict[str, Any]
    params: dict[str, tuple[tuple[type, ...], bool]]
    """name -> (accepted Python types, required)."""
    cancellable: bool = True
    """Run inside ``tracked()`` (and, over HTTP, watch for disconnects)."""
    client_capabilities: Mapping[str, Any] = attrs.field(factory=dict)
    """Client capabilities the tool needs (``-32021`` when undeclared)."""

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }

    def bind(self, arguments: object) -> dict[str, Any]:
        """Check *arguments* against the signature; raise :class:`ToolArgumentError`."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ToolArgumentError("arguments must be an object")
        unknown = sorted(set(arguments) - set(self.params))
        if unknown:
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


def make_tool(
    fn: Callable[..., Awaitable[Any]],
    name: str,
    description: str | None,
    cancellable: bool,
    client_capabilities: Mapping[str, Any] | None = None,
) -> Tool:
    """Build a :class:`Tool` from ``async def fn(ctx, **arguments)``, or a plain ``def``.

    A plain function is a *sync tool*: it runs in a worker thread (see
    :func:`_threaded`), so blocking code never stalls the event loop.
    """
    if not callable(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise TypeError(f"tool {name!r} must be an async function or a plain function")
    run = fn if inspect.iscoroutinefunction(fn) else _threaded(fn, name)
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    parameters = list(signature.parameters.values())[1:]  # the first is the ToolContext
    properties: dict[str, Any] = {}
    required: list[str] = []
    params: dict[str, tuple[tuple[type, ...], bool]] = {}
    for parameter in parameters:
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"tool {name!r}: parameter {parameter.name!r} must be named")
        json_type, accepted = _JSON_TYPES.get(hints.get(parameter.name, Any), (None, ()))
        prop: dict[str, Any] = {"type": json_type} if json_type else {}
        is_required = parameter.default is parameter.empty
        if is_required:
            required.append(parameter.name)
        elif _is_json(parameter.default):
            prop["default"] = parameter.default
        properties[parameter.name] = prop
        params[parameter.name] = (accepted, is_required)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    doc = description if description is not None else inspect.getdoc(fn)
    # Clients and models pick tools by their description: never send an empty one.
    doc = doc or f"The {name} tool."
    return Tool(name, doc, run, schema, params, cancellable, dict(client_capabilities or {}))


def _threaded(fn: Callable[..., Any], name: str) -> Callable[..., Awaitable[Any]]:
    """Run a sync tool in a worker thread bound to its request.

    The thread sees the polled flag (``cancelled()``, ``ctx.cancelled``,
    ``cancel_token()``); at the hard cancel it is abandoned, the request
    ends on time and a ``thread.abandoned`` event is emitted.  ``async``
    ``ctx`` methods are called from the thread with ``trio.from_thread.run``.
    """

    @functools.wraps(fn)
    async def run_in_thread(ctx: Any, **arguments: Any) -> Any:
        return await run_sync(
            functools.partial(fn, ctx, **arguments),
            events=ctx.registry.events,
            thread_name=f"trio_mcp_cancel tool {name}"[:200],
        )

    return run_in_thread


def _is_json(value: object) -> bool:
    try:
        jsonrpc.encode(value)
    except (TypeError, ValueError):
        return False
    return True


def tool_result(value: object) -> dict[str, Any]:
    """Wrap a tool's return value as a ``CallToolResult``.

    ``None`` is no content, a string is one text block, anything else is
    JSON text (a ``dict`` is also the ``structuredContent``).  A value that
    is not strict JSON raises here, inside the tool's error handling.
    """
    if value is None:
        return {"content": [], "isError": False}
    if isinstance(value, str):
        return {"content": [{"type": "text", "text": value}], "isError": False}
    text = jsonrpc.encode(value).decode("ascii")
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(value, dict):
        result["structuredContent"] = value
    return result


def error_result(text: str) -> dict[str, Any]:
    """A ``CallToolResult`` that reports a failure to the model (``isError``)."""
    return {"content": [{"type": "text", "text": text[:1000]}], "isError": True}
