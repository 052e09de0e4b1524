"""A function's signature as MCP arguments: schemas and validation through pydantic.

Tools, prompts and resource templates are plain Python functions.  This
module reads their signatures once, at registration, into a
:class:`Signature`: which parameter (if any) takes the context, one pydantic
validator for all the other parameters, and the JSON Schema (2020-12, the
MCP default dialect) a client sees.  A parameter type pydantic cannot
express is a ``TypeError`` at registration, never a silent ``{}``.

The validator is a ``TypedDict`` built from the parameters, so validation
returns a plain ``dict`` of converted values (a model arrives as the model,
a ``datetime`` as a ``datetime``), parameters with a default that the call
leaves out stay out (the function's own default applies), and any name
(``json``, ``schema``, ``_x``) is a fine key.

Tool arguments are validated in pydantic's *strict JSON* mode: what the
published schema says is what passes (``"2"`` is not an integer, ``1`` not
a boolean), while the JSON forms of richer types (an ISO date string, an
enum's value, an object for a dataclass) convert.  Prompt arguments and
URI-template variables are strings on the wire, so they are converted in
lax mode (``"2"`` becomes ``2`` for an ``int`` parameter).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import (
    Annotated,
    Any,
    Final,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
)

import attrs
import pydantic
import pydantic_core
from pydantic import Field, TypeAdapter
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema
from typing_extensions import TypedDict, is_typeddict

from .._work.threads import ThreadLimit, run_sync

__all__ = [
    "ArgumentsInvalid",
    "ContextParameter",
    "Output",
    "Returns",
    "Signature",
    "admits_none",
    "context_parameter",
    "describe_errors",
    "output_for",
    "read_signature",
    "with_context",
]

Mode = Literal["strict-json", "lax"]
_MAX_ERRORS: Final = 10


class ArgumentsInvalid(ValueError):
    """Arguments that do not fit a signature; the message names every field that failed."""


class _NoTitles(GenerateJsonSchema):
    """Pydantic's schema without the titles it derives from field names (noise to a model)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def dict_schema(self, schema: Any) -> Any:
        # A bare ``dict`` means any values: some pydantic releases (2.8, the
        # floor) leave that implicit, later ones write it; one schema for all.
        result = super().dict_schema(schema)
        if "additionalProperties" not in result and "patternProperties" not in result:
            result["additionalProperties"] = True
        return result


class ContextParameter:
    """What a parameter's annotation subclasses to receive the context, not an argument.

    :class:`~.context.Context` is one; this module cannot import it (the
    context runs tools, tools read signatures), so it looks for the base.
    """

    __slots__ = ()


def _is_context(parameter: inspect.Parameter) -> bool:
    hint = parameter.annotation
    if hint is parameter.empty or hint is Any:
        # The convention before annotations were read: ``ctx`` (unannotated, or ``Any``).
        return parameter.name == "ctx"
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return isinstance(hint, type) and issubclass(hint, ContextParameter)


def _signature(fn: Callable[..., Any], what: str) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)
    except (NameError, SyntaxError, TypeError) as exc:
        raise TypeError(f"{what}: cannot read the annotations: {exc}") from exc


def context_parameter(fn: Callable[..., Any], what: str) -> str | None:
    """The name of *fn*'s context parameter (annotated ``Context``), or ``None``."""
    found = [p for p in _signature(fn, what).parameters.values() if _is_context(p)]
    if len(found) > 1:
        raise TypeError(f"{what}: more than one parameter takes the context")
    return found[0].name if found else None


@attrs.frozen
class Signature:
    """The parameters of a function as MCP arguments (see the module docstring)."""

    context: str | None
    """The parameter that receives the ``Context``, if any."""
    first: bool
    """The context is the first parameter (passed positionally, as ``fn(ctx, ...)``)."""
    names: tuple[str, ...]
    """The argument names, in signature order."""
    required: frozenset[str]
    schema: dict[str, Any]
    """JSON Schema (2020-12) of the arguments object."""
    descriptions: Mapping[str, str]
    adapter: TypeAdapter[dict[str, Any]]
    mode: Mode
    fill: Mapping[str, Any]
    """Defaults given as ``param: T = Field(default=...)``: the function cannot apply those."""
    known: frozenset[str] = frozenset()
    """:attr:`names` as a set: any other argument is refused before validation."""
    native: bool = False
    """Every parameter is a JSON type already (``int``, ``str``, ``list[str]``, ...): strict
    validation of the decoded values is the same as of the JSON, without re-encoding it."""
    _validate_python: Callable[..., dict[str, Any]] = attrs.field(init=False, repr=False)
    """The adapter's core validator itself, when it is built (the usual case): every call
    validates its arguments, and ``TypeAdapter.validate_python`` only adds a Python frame
    and argument handling around it (measured in benchmarks/RESULTS.md, row 7)."""

    @_validate_python.default
    def _core_validator(self) -> Callable[..., dict[str, Any]]:
        validator = getattr(self.adapter, "validator", None)
        if isinstance(validator, pydantic_core.SchemaValidator):
            method: Callable[..., dict[str, Any]] = validator.validate_python
            return method
        return self.adapter.validate_python  # not built yet: the adapter builds it

    def validate(self, arguments: object) -> dict[str, Any]:
        """Validated and converted *arguments*; :class:`ArgumentsInvalid` names what failed."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ArgumentsInvalid("arguments must be an object")
        if not self.known.issuperset(arguments):
            unknown = sorted(str(key) for key in arguments if key not in self.known)
            raise ArgumentsInvalid(f"unknown argument {unknown[0]!r}"[:300])
        json_mode = self.mode == "strict-json"
        try:
            if json_mode and not self.native:
                # The arguments were JSON on the wire: validate them as JSON, strictly,
                # so the published schema is exactly what passes.
                converted = self._as_json(arguments)
            else:
                converted = self._validate_python(arguments, strict=json_mode)
        except pydantic.ValidationError as exc:
            if not (json_mode and self.native):
                raise ArgumentsInvalid(describe_errors(exc)) from None
            # Rare: say it in JSON's words ("a valid array", not "a valid list").
            converted = self._as_json(arguments)
        if self.fill:
            for name, value in self.fill.items():
                converted.setdefault(name, value)
        return converted

    def _as_json(self, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.adapter.validate_json(pydantic_core.to_json(arguments), strict=True)
        except pydantic.ValidationError as exc:
            raise ArgumentsInvalid(describe_errors(exc)) from None
        except pydantic_core.PydanticSerializationError as exc:
            raise ArgumentsInvalid(f"arguments are not JSON: {exc}"[:300]) from None


def describe_errors(exc: pydantic.ValidationError) -> str:
    """One line per failed field, by its location (``point.x``, ``tags.1``)."""
    parts: list[str] = []
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    for error in errors[:_MAX_ERRORS]:
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "missing":
            parts.append(f"missing argument {where!r}")
        elif error["type"] == "extra_forbidden":
            parts.append(f"unknown argument {where!r}")
        else:
            parts.append(f"{where!r}: {error['msg']}" if where else str(error["msg"]))
    if len(errors) > _MAX_ERRORS:
        parts.append(f"and {len(errors) - _MAX_ERRORS} more")
    return "; ".join(parts)


def read_signature(
    fn: Callable[..., Any],
    what: str,
    *,
    mode: Mode = "strict-json",
    descriptions: Mapping[str, str] | None = None,
) -> Signature:
    """Read *fn*'s parameters into a :class:`Signature` (``TypeError`` for what cannot be).

    Descriptions come from ``Annotated[T, "text"]``, ``Field(description=...)``
    or *descriptions* (a docstring's ``Args:``), in that order of precedence.
    """
    parameters = list(_signature(fn, what).parameters.values())
    context_name: str | None = None
    first = False
    fields: dict[str, Any] = {}
    required: set[str] = set()
    defaults: dict[str, Any] = {}
    fill: dict[str, Any] = {}
    described: dict[str, str] = {}
    for index, parameter in enumerate(parameters):
        if _is_context(parameter):
            if context_name is not None:
                raise TypeError(f"{what}: more than one parameter takes the context")
            # Passed positionally only when it comes first and may be (not after ``*``).
            context_name = parameter.name
            first = index == 0 and parameter.kind is not parameter.KEYWORD_ONLY
            if parameter.kind is parameter.POSITIONAL_ONLY and not first:
                raise TypeError(f"{what}: a positional-only context must come first")
            continue
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"{what}: parameter {parameter.name!r} must be named")
        hint, text, default = _parameter_hint(parameter, (descriptions or {}).get(parameter.name))
        if text is not None:
            described[parameter.name] = text
        _check_type(hint, f"{what}: parameter {parameter.name!r}")
        if default is inspect.Parameter.empty:
            required.add(parameter.name)
            fields[parameter.name] = Required[hint]
        else:
            fields[parameter.name] = NotRequired[hint]
            defaults[parameter.name] = (hint, default)
            if parameter.default is not default:
                fill[parameter.name] = default  # given as Field(default=...)
    make_typeddict: Any = TypedDict  # a TypedDict made at run time, from the parameters
    arguments: Any = make_typeddict(f"{_safe_name(what)}Arguments", fields)
    # Unknown names are refused by Signature.validate and strictness is asked per call:
    # a config here would reach into the user's dataclasses differently across versions.
    try:
        adapter: TypeAdapter[dict[str, Any]] = TypeAdapter(arguments)
        schema = adapter.json_schema(schema_generator=_NoTitles)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        raise TypeError(f"{what}: the parameters cannot be validated: {exc}") from exc
    schema.pop("title", None)
    # The reader's order: type, properties, required, then the rest ($defs last).
    schema = {
        "type": schema.pop("type", "object"),
        "properties": schema.pop("properties", {}),
        **schema,
    }
    schema["additionalProperties"] = False  # what Signature.validate enforces
    if "$defs" in schema:
        schema["$defs"] = schema.pop("$defs")
    for name, (hint, default) in defaults.items():
        shown = _json_default(hint, default)
        if shown is not _NO_DEFAULT:
            schema["properties"][name]["default"] = shown
    return Signature(
        context_name,
        first,
        tuple(fields),
        frozenset(required),
        schema,
        described,
        adapter,
        mode,
        fill,
        known=frozenset(fields),
        native=all(_json_native(get_args(hint)[0]) for hint in fields.values()),
    )


_NATIVE: Final = (int, float, str, bool, type(None))


def _json_native(hint: Any) -> bool:
    """Whether the decoded JSON for *hint* validates strictly as Python the same as JSON.

    True for the JSON types themselves and containers of them; false for
    anything strict Python mode wants as an instance (``datetime``, enums,
    models, dataclasses, tuples), which strict JSON mode builds from JSON.
    """
    origin = get_origin(hint)
    if origin is Annotated:
        base, *metadata = get_args(hint)
        return _json_native(base) and all(isinstance(m, FieldInfo) for m in metadata)
    if hint is Any or hint in _NATIVE or hint in (list, dict):
        return True
    if origin is Literal:
        return all(isinstance(value, _NATIVE) for value in get_args(hint))
    if origin in (Union, types.UnionType, list):
        return all(_json_native(arg) for arg in get_args(hint))
    if origin is dict:
        key, value = get_args(hint)
        return key is str and _json_native(value)
    return False


def _safe_name(what: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in what.split(" ")[-1].strip("'\""))


def _parameter_hint(parameter: inspect.Parameter, doc: str | None) -> tuple[Any, str | None, Any]:
    """The annotation to validate with, the description, and the default (``empty``: required)."""
    hint: Any = Any if parameter.annotation is parameter.empty else parameter.annotation
    default = parameter.default
    metadata: list[Any] = []
    if isinstance(default, FieldInfo):
        # ``x: int = Field(default=3, description=...)``: the FieldInfo is metadata.
        metadata.append(default)
        default = default.get_default(call_default_factory=True)
        if default is pydantic_core.PydanticUndefined:
            default = inspect.Parameter.empty
    if get_origin(hint) is Annotated:
        base, *extra = get_args(hint)
        metadata = [*extra, *metadata]
        hint = base
    text = next((m for m in metadata if isinstance(m, str)), None)
    kept = [m for m in metadata if not isinstance(m, str)]
    given = next((m.description for m in kept if isinstance(m, FieldInfo) and m.description), None)
    text = given or text or doc
    if text is not None and given is None:
        kept.append(Field(description=text))
    if kept:
        hint = Annotated[(hint, *kept)]
    return hint, text, default


_NO_DEFAULT: Final = object()


def _json_default(hint: Any, default: Any) -> Any:
    """*default* as JSON for the schema's ``default``, or ``_NO_DEFAULT`` when it has none."""
    try:
        shown = TypeAdapter(hint).dump_python(default, mode="json")
        json.dumps(shown, allow_nan=False)
    except (ValueError, TypeError, pydantic.PydanticUserError):
        return _NO_DEFAULT
    return shown


def _check_type(hint: Any, what: str) -> None:
    """A ``TypeError`` naming the parameter when pydantic cannot validate or describe *hint*."""
    try:
        TypeAdapter(hint).json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        first = str(exc).splitlines()[0]
        raise TypeError(f"{what}: type {hint!r} cannot be validated or described: {first}") from exc


# -- calling ---------------------------------------------------------------------------


def with_context(
    fn: Callable[..., Any],
    signature: Signature | str | None,
    what: str,
    threads: ThreadLimit | None,
) -> Callable[..., Awaitable[Any]]:
    """``call(ctx, **arguments)`` for *fn*, wherever its context parameter is (or without one).

    An ``async def`` is called directly (no extra coroutine).  A plain
    ``def`` runs in a worker thread through the library's cancellable
    thread helper (:func:`~trio_mcp_cancel.run_sync`): blocking code never
    stalls the event loop, the thread sees the polled flag, and at the hard
    cancel it is abandoned so the request ends on time.  *threads* bounds
    the threads it holds.
    """
    if isinstance(signature, Signature):
        name, first = signature.context, signature.first
    else:
        name = signature
        parameters = list(_signature(fn, what).parameters.values())
        first = (
            name is not None
            and parameters[0].name == name
            and parameters[0].kind is not parameters[0].KEYWORD_ONLY
        )
    is_async = inspect.iscoroutinefunction(fn)
    call: Callable[..., Any]
    if name is not None and first:
        call = fn
    elif name is not None:
        context_name = name

        def call(ctx: Any, /, **arguments: Any) -> Any:
            arguments[context_name] = ctx
            return fn(**arguments)

    else:

        def call(ctx: Any, /, **arguments: Any) -> Any:
            return fn(**arguments)

    if is_async:
        return functools.wraps(fn)(call) if call is not fn else fn
    return _threaded(call, fn, what, ThreadLimit(40) if threads is None else threads)


def _threaded(
    call: Callable[..., Any], fn: Callable[..., Any], what: str, threads: ThreadLimit
) -> Callable[..., Awaitable[Any]]:
    """Run a sync function in a worker thread bound to its request (see :func:`with_context`).

    The thread comes from *threads*, never from Trio's default limiter, so
    stuck threads starve only the functions that share their limit.
    ``async`` ``ctx`` methods are called from the thread with
    ``trio.from_thread.run``.
    """

    @functools.wraps(fn)
    async def run_in_thread(ctx: Any, /, **arguments: Any) -> Any:
        return await run_sync(
            functools.partial(call, ctx, **arguments),
            events=ctx.registry.events,
            limiter=threads.limiter,
            thread_name=f"trio_mcp_cancel {what}"[:200],
        )

    return run_in_thread


def check_callable(fn: object, what: str) -> None:
    """A ``TypeError`` unless *fn* is an ``async def`` or a plain function (not a generator)."""
    if not callable(fn) or inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise TypeError(f"{what} must be an async function or a plain function")


# -- results ---------------------------------------------------------------------------


@attrs.frozen
class Output:
    """The structured result a return annotation promises: its schema and its validator."""

    adapter: TypeAdapter[Any]
    schema: dict[str, Any]

    def structured(self, value: object) -> dict[str, Any]:
        """*value* validated against the annotation, as a JSON object (``TypeError`` if not)."""
        try:
            checked = self.adapter.validate_python(value)
            dumped = self.adapter.dump_python(checked, mode="json")
        except pydantic.ValidationError as exc:
            raise TypeError(
                f"the result does not match the output schema: {describe_errors(exc)}"
            ) from None
        if not isinstance(dumped, dict):
            raise TypeError("the result does not match the output schema: not an object")
        return dumped


def _unwrap(hint: Any) -> Any:
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


def output_for(fn: Callable[..., Any], what: str) -> Output | None:
    """The :class:`Output` of *fn*'s return annotation, when it is a structured type.

    A pydantic model, a dataclass or a ``TypedDict`` gives an ``outputSchema``
    and its return value becomes ``structuredContent``.  Other annotations
    (``str``, ``int``, ``list[...]``, ``dict``, content objects) keep their
    plain results: declare ``output_schema=`` for those.
    """
    hint = _unwrap(_signature(fn, what).return_annotation)
    if not isinstance(hint, type):
        return None
    if not (
        issubclass(hint, pydantic.BaseModel) or dataclasses.is_dataclass(hint) or is_typeddict(hint)
    ):
        return None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint)
        schema = adapter.json_schema(mode="serialization", schema_generator=_NoTitles)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        raise TypeError(f"{what}: the return type cannot be described: {exc}") from exc
    return Output(adapter, schema)


@attrs.frozen
class Returns:
    """A plain return annotation JSON cannot carry as is (``datetime``, ``UUID``, an enum, ...).

    The value is turned into its JSON form by pydantic, the same form the
    annotation's schema would describe: ISO 8601 text for dates and times,
    the value of an enum, a string for ``UUID``, ``Decimal`` and ``Path``.
    """

    adapter: TypeAdapter[Any]

    def to_json(self, value: object) -> object:
        """*value*'s JSON form; *value* itself when pydantic cannot serialize it.

        A tool that returns something other than its annotation says gets
        pydantic's inference instead (no warning: the result is still right
        for what was returned); a value nothing can serialize is left for the
        usual strict-JSON error of the result.
        """
        try:
            return self.adapter.dump_python(value, mode="json", warnings=False)
        except pydantic_core.PydanticSerializationError:
            return value


def returns_for(fn: Callable[..., Any], what: str) -> Returns | None:
    """The :class:`Returns` of *fn*'s return annotation, when it needs one.

    ``None`` for no annotation, JSON types (``str``, ``int``, ``dict``,
    lists of them...) and annotations naming this library's own result
    types (content objects, ``ToolResult``, ``InputRequired``), which the
    result builder handles itself.  An annotation pydantic cannot serialize
    is a ``TypeError`` here, at registration, rather than a failed call.
    """
    hint = _unwrap(_signature(fn, what).return_annotation)
    if (
        hint in (inspect.Signature.empty, None, object)
        or _json_native(hint)
        or _names_own_type(hint)
    ):
        return None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(hint)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        shown = getattr(hint, "__name__", repr(hint))
        raise TypeError(
            f"{what}: the return type {shown} cannot be turned into JSON (pydantic cannot "
            f"serialize it); return a str, a dict, content, or a type pydantic can serialize"
        ) from exc
    return Returns(adapter)


def _names_own_type(hint: Any) -> bool:
    """Whether *hint* mentions a class of this library (the result builder knows those)."""
    if isinstance(hint, type) and hint.__module__.startswith("trio_mcp_cancel."):
        return True
    return any(_names_own_type(arg) for arg in get_args(hint))


def admits_none(fn: Callable[..., Any], what: str) -> bool:
    """Whether *fn*'s return annotation allows ``None`` (no annotation does)."""
    hint = _unwrap(_signature(fn, what).return_annotation)
    if hint in (inspect.Signature.empty, None, type(None), Any, object):
        return True
    if get_origin(hint) in (Union, types.UnionType):
        return any(_unwrap(arg) in (type(None), Any, object) for arg in get_args(hint))
    return False
