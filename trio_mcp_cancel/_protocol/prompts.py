"""Prompts (templates of messages) and argument completion.

Pure code with no I/O.  A prompt is a function (``async def`` or a plain
``def``, run in a worker thread) whose named parameters are its arguments;
the one annotated ``Context``, at any position, takes the context.  MCP
sends arguments as strings: a parameter annotated with another type gets the
string converted by pydantic (``"3"`` for an ``int``, an enum's value, an ISO
date), and a string that fails is ``-32602`` naming the argument.  It
returns a ``str`` (one user text message), a content object (one user
message), or a list of those and :class:`PromptMessage`.  A completer is
``async def fn(ctx, value, context) -> list[str]`` for one argument of a
prompt or a resource template.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from .._wire.jsonrpc import INVALID_PARAMS, JsonRpcError
from .._work.threads import ThreadLimit
from .content import to_content
from .signature import ArgumentsInvalid, Signature, check_callable, read_signature, with_context

__all__ = [
    "MAX_COMPLETIONS",
    "Completer",
    "PromptMessage",
    "Prompt",
    "PromptSet",
    "completion_result",
    "make_prompt",
    "prompt_result",
]

#: MCP caps ``completion.values`` at 100 items.
MAX_COMPLETIONS: Final = 100

Completer = Callable[..., Awaitable[Sequence[str]]]


@attrs.frozen
class PromptMessage:
    """One prompt message: a role and one content block (or a ``str``: text)."""

    role: Literal["user", "assistant"]
    content: object

    def to_wire(self) -> dict[str, Any]:
        return {"role": self.role, "content": to_content(self.content)}


@attrs.frozen
class Prompt:
    name: str
    fn: Callable[..., Awaitable[Any]]
    description: str
    arguments: tuple[dict[str, Any], ...]
    title: str | None = None
    signature: Signature | None = None
    """Converts the string arguments to the parameters' types."""
    time_limit: float | None = None
    """Seconds a ``prompts/get`` may take (:mod:`.time_limits`); ``None``: the server-wide
    limit only."""
    icons: tuple[dict[str, Any], ...] = ()

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.title is not None:
            described["title"] = self.title
        if self.icons:
            described["icons"] = [dict(icon) for icon in self.icons]
        if self.arguments:
            described["arguments"] = [dict(argument) for argument in self.arguments]
        return described

    def bind(self, arguments: object) -> dict[str, Any]:
        """Check *arguments*: an object of strings with every required one (``-32602``).

        Then each is converted to its parameter's type (``-32602`` naming it when it fails).
        """
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict) or not all(
            isinstance(v, str) for v in arguments.values()
        ):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: arguments must map to strings")
        known = {argument["name"] for argument in self.arguments}
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise JsonRpcError(
                INVALID_PARAMS, f"Invalid params: unknown argument {unknown[0]!r}"[:200]
            )
        for argument in self.arguments:
            if argument.get("required") and argument["name"] not in arguments:
                raise JsonRpcError(
                    INVALID_PARAMS, f"Invalid params: missing argument {argument['name']!r}"
                )
        if self.signature is None:
            return arguments
        try:
            return self.signature.validate(arguments)
        except ArgumentsInvalid as exc:
            raise JsonRpcError(INVALID_PARAMS, f"Invalid params: {exc}"[:500]) from None


def make_prompt(
    fn: Callable[..., Any],
    name: str,
    description: str | None,
    title: str | None,
    threads: ThreadLimit | None = None,
    *,
    time_limit: float | None = None,
    icons: tuple[dict[str, Any], ...] = (),
) -> Prompt:
    """Build a :class:`Prompt` from ``async def`` or a plain ``def`` (run in a worker thread).

    Argument descriptions come from ``Annotated[str, "..."]`` or
    ``Field(description=...)``; a type pydantic cannot express is a
    ``TypeError`` here.
    """
    what = f"prompt {name!r}"
    check_callable(fn, what)
    signature = read_signature(fn, what, mode="lax")
    arguments: list[dict[str, Any]] = []
    for parameter in signature.names:
        argument: dict[str, Any] = {
            "name": parameter,
            "required": parameter in signature.required,
        }
        if parameter in signature.descriptions:
            argument["description"] = signature.descriptions[parameter]
        arguments.append(argument)
    doc = description if description is not None else inspect.getdoc(fn)
    run = with_context(fn, signature, f"prompt {name}", threads)
    return Prompt(
        name,
        run,
        doc or f"The {name} prompt.",
        tuple(arguments),
        title,
        signature=signature,
        time_limit=time_limit,
        icons=icons,
    )


def prompt_result(value: object, description: str | None = None) -> dict[str, Any]:
    """The ``GetPromptResult`` for a prompt function's return *value*."""
    items = value if isinstance(value, list) else [value]
    messages = [
        item.to_wire()
        if isinstance(item, PromptMessage)
        else {"role": "user", "content": to_content(item)}
        for item in items
    ]
    result: dict[str, Any] = {"messages": messages}
    if description is not None:
        result["description"] = description
    return result


@attrs.define
class PromptSet:
    prompts: dict[str, Prompt] = attrs.field(factory=dict)
    completers: dict[tuple[str, str, str], Completer] = attrs.field(factory=dict)
    """(``ref/prompt`` | ``ref/resource``, prompt name or URI template, argument) -> completer."""

    def add(self, prompt: Prompt) -> None:
        if prompt.name in self.prompts:
            raise ValueError(f"prompt {prompt.name!r} is already registered")
        self.prompts[prompt.name] = prompt

    def find(self, name: object) -> Prompt:
        prompt = self.prompts.get(name) if isinstance(name, str) else None
        if prompt is None:
            raise JsonRpcError(
                INVALID_PARAMS, "Invalid params: unknown prompt", {"name": str(name)[:100]}
            )
        return prompt

    def completer(self, params: Mapping[str, Any]) -> tuple[Completer | None, str, dict[str, str]]:
        """The completer a ``completion/complete`` asks for, the value typed so far, the context."""
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: ref and argument are required")
        kind = ref.get("type")
        key = ref.get("name") if kind == "ref/prompt" else ref.get("uri")
        name, value = argument.get("name"), argument.get("value", "")
        if kind not in ("ref/prompt", "ref/resource") or not isinstance(key, str):
            raise JsonRpcError(INVALID_PARAMS, "Invalid params: unknown ref type")
        if not isinstance(name, str) or not isinstance(value, str):
            raise JsonRpcError(
                INVALID_PARAMS, "Invalid params: argument name and value are strings"
            )
        if kind == "ref/prompt":
            self.find(key)
        context = params.get("context")
        known = context.get("arguments") if isinstance(context, dict) else None
        given = {k: v for k, v in (known or {}).items() if isinstance(v, str)}
        return self.completers.get((kind, key, name)), value, given


def completion_result(values: Sequence[str]) -> dict[str, Any]:
    """``CompleteResult``: at most :data:`MAX_COMPLETIONS` values, with the total."""
    values = [v for v in values if isinstance(v, str)]
    return {
        "completion": {
            "values": values[:MAX_COMPLETIONS],
            "total": len(values),
            "hasMore": len(values) > MAX_COMPLETIONS,
        }
    }
