"""The fixtures of the official MCP conformance suite, served with this library's public API.

``python3 dev.py conformance`` starts it and runs
``@modelcontextprotocol/conformance server --requirements 2025-11-25`` and
``--requirements 2026-07-28`` against it.  On its own::

    python examples/conformance_server.py --port 3000   # --port 0: any free port

serves both MCP eras on http://127.0.0.1:3000/mcp and prints that URL.
Every fixture is an ordinary tool, resource or prompt, so this file is also
a tour of the server API: content of every type, structured output, a
hand-written JSON Schema, resources and templates, prompts and completion,
logging, progress, list-changed notifications, asking the client mid-call
(``ctx.elicit``, ``ctx.sample``: both eras), multi round-trip
requests (``InputRequired``) and the Tasks extension (tools that run as
tasks, ask for input inside them or before them, and stop on
``tasks/cancel``), whose not-scored scenarios ``dev.py conformance`` also
judges (``conformance/baseline-tasks.yml``).  Two more tools are not the
suite's: ``test_cancellable_work`` and ``test_cancellation_status``, the
fixtures of our cancellation scenarios (``conformance/scenarios/``), which
``dev.py conformance`` runs too.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
from functools import partial
from typing import Annotated, Any

import trio

from trio_mcp_cancel import checkpoint_cancelled, open_registry
from trio_mcp_cancel.http import McpHttpApp, serve, server_config
from trio_mcp_cancel.lowlevel import JsonRpcError
from trio_mcp_cancel.server import (
    Audio,
    Context,
    EmbeddedResource,
    Image,
    InputRequired,
    McpServer,
    PromptMessage,
    Tasks,
    Text,
    ToolError,
)

#: A 1x1 red PNG and a minimal WAV file.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
WAV = base64.b64decode("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")

server = McpServer("trio-mcp-cancel-conformance", "1.0.0", extensions=[Tasks()])


# -- tools: content of every type ------------------------------------------------


@server.tool()
async def test_simple_text(ctx: Context) -> str:
    """Tests simple text content response."""
    return "This is a simple text response for testing."


@server.tool()
async def test_image_content(ctx: Context) -> Image:
    """Tests image content response."""
    return Image(PNG, "image/png")


@server.tool()
async def test_audio_content(ctx: Context) -> Audio:
    """Tests audio content response."""
    return Audio(WAV, "audio/wav")


@server.tool()
async def test_embedded_resource(ctx: Context) -> EmbeddedResource:
    """Tests embedded resource content response."""
    return EmbeddedResource(
        "test://embedded-resource", "This is an embedded resource content.", "text/plain"
    )


@server.tool()
async def test_multiple_content_types(ctx: Context) -> list[Any]:
    """Tests response with multiple content types (text, image, resource)."""
    return [
        Text("Multiple content types test:"),
        Image(PNG, "image/png"),
        EmbeddedResource(
            "test://mixed-content-resource",
            json.dumps({"test": "data", "value": 123}),
            "application/json",
        ),
    ]


@server.tool()
async def test_error_handling(ctx: Context) -> str:
    """Tests error response handling."""
    raise ToolError("This tool intentionally returns an error for testing")


@server.tool()
async def test_tool_with_logging(ctx: Context) -> str:
    """Tests a tool that emits log messages during execution."""
    await ctx.log("info", "Tool execution started")
    await trio.sleep(0.05)
    await ctx.log("info", "Tool processing data")
    await trio.sleep(0.05)
    await ctx.log("info", "Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool()
async def test_logging_tool(ctx: Context) -> str:
    """Logs at info level: a modern client gets the messages only if it set a logLevel."""
    await ctx.log("info", "test_logging_tool ran")
    return "logged"


@server.tool()
async def test_tool_with_progress(ctx: Context) -> str:
    """Tests a tool that reports progress notifications."""
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
        if step < 100:
            await trio.sleep(0.05)
    return str(ctx.progress_token)


@server.tool(
    input_schema={
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": False,
    }
)
async def json_schema_2020_12_tool(ctx: Context, **contact: Any) -> str:
    """Tool with JSON Schema 2020-12 features, sent exactly as written."""
    return "ok"


@server.tool(
    output_schema={
        "type": "object",
        "properties": {"sum": {"type": "number"}},
        "required": ["sum"],
    },
    annotations={"readOnlyHint": True, "idempotentHint": True},
)
async def add(
    ctx: Context, a: Annotated[float, "first addend"], b: Annotated[float, "second"] = 0.0
) -> dict[str, float]:
    """Add two numbers (structured output)."""
    return {"sum": a + b}


@server.tool(
    input_schema={
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "query": {"type": "string"},
        },
        "required": ["region"],
    }
)
async def test_region_routing(ctx: Context, region: str, query: str = "") -> str:
    """Its region travels in the Mcp-Param-Region header too (SEP-2243), for routing."""
    return f"{region}: {query}"


# Asking the client mid-call: ctx.elicit / ctx.sample send a request on the
# call's stream in the legacy era and become an MRTR round in 2026-07-28.
_CONTACT_SCHEMA = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}
_DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {
            "type": "string",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "default": True},
    },
}
_ENUMS_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


@server.tool()
async def test_sampling(ctx: Context, prompt: str) -> str:
    """Asks the client's model (sampling/createMessage) and reports its answer."""
    result = await ctx.sample(prompt, 100)
    content = result.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return f"LLM response: {text}"


@server.tool()
async def test_elicitation(ctx: Context, message: str) -> str:
    """Asks the user for a name and an email (elicitation/create)."""
    answer = await ctx.elicit(message, _CONTACT_SCHEMA)
    return f"User response: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool()
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Elicitation whose schema has a default for every primitive type (SEP-1034)."""
    answer = await ctx.elicit("Please review your details", _DEFAULTS_SCHEMA)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool()
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Elicitation with the five enum forms of SEP-1330."""
    answer = await ctx.elicit("Please choose", _ENUMS_SCHEMA)
    return f"Elicitation completed: action={answer.action}, content={json.dumps(answer.content)}"


@server.tool(client_capabilities={"sampling": {}})
async def test_missing_capability(ctx: Context) -> str:
    """Needs the client's sampling capability (-32021 when it did not declare it)."""
    return "the client declared sampling"


# -- list-changed triggers ---------------------------------------------------------


async def _dynamic_tool(ctx: Context) -> str:
    return "dynamic"


async def _dynamic_prompt(ctx: Context) -> str:
    return "dynamic"


@server.tool()
async def test_trigger_tool_change(ctx: Context) -> str:
    """Adds or removes the tool 'test_dynamic_tool' (a tools list_changed notification)."""
    if "test_dynamic_tool" in server.registration.tools:
        server.remove_tool("test_dynamic_tool")
        return "removed test_dynamic_tool"
    server.tool("test_dynamic_tool", description="Appears and disappears.")(_dynamic_tool)
    return "added test_dynamic_tool"


@server.tool()
async def test_reconnection(ctx: Context) -> str:
    """Closes its SSE stream mid-call (SEP-1699 polling); the client resumes with Last-Event-ID."""
    ctx.close_stream()  # after the priming event: the client knows where to resume from
    await trio.sleep(0.2)
    return "Reconnection test completed successfully"


@server.tool()
async def test_trigger_prompt_change(ctx: Context) -> str:
    """Adds or removes the prompt 'test_dynamic_prompt' (a prompts list_changed notification)."""
    if "test_dynamic_prompt" in server.registration.prompts.prompts:
        server.remove_prompt("test_dynamic_prompt")
        return "removed test_dynamic_prompt"
    server.prompt("test_dynamic_prompt", description="Appears and disappears.")(_dynamic_prompt)
    return "added test_dynamic_prompt"


# -- multi round-trip requests (2026-07-28) ----------------------------------------

_NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _accepted(responses: Any, key: str) -> dict[str, Any] | None:
    """The content of an accepted elicitation answer under *key*, if there is one."""
    answer = responses.get(key) if isinstance(responses, dict) else None
    if not isinstance(answer, dict) or answer.get("action") != "accept":
        return None
    content = answer.get("content")
    return content if isinstance(content, dict) else None


def _sampled_text(responses: Any, key: str) -> str | None:
    answer = responses.get(key) if isinstance(responses, dict) else None
    content = answer.get("content") if isinstance(answer, dict) else None
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else None


def _roots(responses: Any, key: str) -> list[str] | None:
    answer = responses.get(key) if isinstance(responses, dict) else None
    roots = answer.get("roots") if isinstance(answer, dict) else None
    if not isinstance(roots, list):
        return None
    return [str(r.get("uri")) for r in roots if isinstance(r, dict)]


@server.tool()
async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequired:
    """Asks the user's name (elicitation), then greets them."""
    answer = _accepted(ctx.input_responses, "user_name")
    if answer is None or not isinstance(answer.get("name"), str):
        return InputRequired(
            {"user_name": InputRequired.elicit("What is your name?", _NAME_SCHEMA)}
        )
    return f"Hello, {answer['name']}!"


@server.tool()
async def test_streaming_elicitation(ctx: Context) -> str | InputRequired:
    """Needs user input: asks for it with InputRequired, never with a server-to-client request."""
    answer = _accepted(ctx.input_responses, "user_name")
    if answer is None:
        return InputRequired(
            {"user_name": InputRequired.elicit("What is your name?", _NAME_SCHEMA)}
        )
    return f"Hello, {answer.get('name')}!"


@server.tool()
async def test_input_required_result_sampling(ctx: Context) -> str | InputRequired:
    """Asks the client's model a question (sampling), then reports the answer."""
    text = _sampled_text(ctx.input_responses, "capital_question")
    if text is None:
        return InputRequired(
            {"capital_question": InputRequired.sample("What is the capital of France?", 100)}
        )
    return f"The model answered: {text}"


@server.tool()
async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequired:
    """Asks for the client's roots, then lists them."""
    roots = _roots(ctx.input_responses, "client_roots")
    if roots is None:
        return InputRequired({"client_roots": InputRequired.list_roots()})
    return f"Client roots: {', '.join(roots) or '(none)'}"


@server.tool()
async def test_input_required_result_request_state(ctx: Context) -> str | InputRequired:
    """Round-trips a sealed requestState."""
    confirm_schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    }
    answer = _accepted(ctx.input_responses, "confirm")
    if answer is None or ctx.request_state != {"awaiting": "confirm"}:
        return InputRequired(
            {"confirm": InputRequired.elicit("Please confirm", confirm_schema)},
            state={"awaiting": "confirm"},
        )
    return f"state-ok: confirmed={answer.get('ok')}"


@server.tool()
async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequired:
    """Asks for three inputs at once: elicitation, sampling and roots."""
    responses = ctx.input_responses
    name = _accepted(responses, "user_name")
    greeting = _sampled_text(responses, "greeting")
    roots = _roots(responses, "client_roots")
    if name is None or greeting is None or roots is None or ctx.request_state != "all-three":
        return InputRequired(
            {
                "user_name": InputRequired.elicit("What is your name?", _NAME_SCHEMA),
                "greeting": InputRequired.sample("Generate a greeting", 50),
                "client_roots": InputRequired.list_roots(),
            },
            state="all-three",
        )
    return f"{greeting} {name.get('name')} (roots: {', '.join(roots)})"


@server.tool()
async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequired:
    """Two rounds of questions, the state carrying the first answer into the second."""
    state = ctx.request_state
    color_schema = {
        "type": "object",
        "properties": {"color": {"type": "string"}},
        "required": ["color"],
    }
    if isinstance(state, dict) and state.get("round") == 2:
        color = _accepted(ctx.input_responses, "step2")
        if color is not None:
            return f"{state['name']} likes {color.get('color')}"
        return InputRequired(
            {"step2": InputRequired.elicit("Step 2: What is your favorite color?", color_schema)},
            state=state,
        )
    name = _accepted(ctx.input_responses, "step1")
    if isinstance(state, dict) and state.get("round") == 1 and name is not None:
        return InputRequired(
            {"step2": InputRequired.elicit("Step 2: What is your favorite color?", color_schema)},
            state={"round": 2, "name": name.get("name")},
        )
    return InputRequired(
        {"step1": InputRequired.elicit("Step 1: What is your name?", _NAME_SCHEMA)},
        state={"round": 1},
    )


@server.tool()
async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequired:
    """Seals its state; a tampered one is refused (-32602) before this code runs."""
    answer = _accepted(ctx.input_responses, "confirm")
    if answer is None or ctx.request_state is None:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        return InputRequired(
            {"confirm": InputRequired.elicit("Confirm?", schema)}, state={"approved": False}
        )
    return "state verified"


@server.tool()
async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequired:
    """Asks only for what the client declared it can answer."""
    declared = ctx.client_capabilities
    if ctx.input_responses:
        return f"received {', '.join(sorted(ctx.input_responses))}"
    requests: dict[str, Any] = {}
    if "elicitation" in declared:
        requests["user_name"] = InputRequired.elicit("What is your name?", _NAME_SCHEMA)
    if "sampling" in declared:
        requests["greeting"] = InputRequired.sample("Generate a greeting", 50)
    if "roots" in declared:
        requests["client_roots"] = InputRequired.list_roots()
    if not requests:
        return "the client declared no input capability"
    return InputRequired(requests)


# -- the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663; not scored) -------


@server.tool()
async def greet(ctx: Context, name: str = "World") -> str:
    """Returns a synchronous greeting (never a task)."""
    return f"Hello, {name}!"


@server.tool(task="optional")
async def slow_compute(
    ctx: Context,
    seconds: Annotated[float, "how long to work"] = 1.0,
    label: Annotated[str, "a label echoed in the result"] = "work",
) -> str:
    """Works for *seconds*: a task when the client declares the extension; tasks/cancel stops it."""
    deadline = trio.current_time() + max(0.0, seconds)
    while trio.current_time() < deadline:
        await checkpoint_cancelled()
        await trio.sleep(min(0.1, deadline - trio.current_time()))
    return f"Completed {label} after {seconds}s"


@server.tool(task="required")
async def failing_job(ctx: Context) -> str:
    """Always ends in a tool execution error (a completed task with isError)."""
    await trio.sleep(1.0)
    raise ToolError("The task job failed")


@server.tool(task="required")
async def protocol_error_job(ctx: Context) -> str:
    """Always ends in a protocol error (a failed task with its JSON-RPC error)."""
    await trio.sleep(0.2)
    raise JsonRpcError(-32603, "Internal error: protocol_error_job always fails")


_CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean"}},
    "required": ["confirm"],
}


@server.tool(task="optional")
async def confirm_delete(ctx: Context, filename: str = "file.txt") -> str | InputRequired:
    """Asks for confirmation from inside the task (input_required, answered by tasks/update)."""
    answer = _accepted(ctx.input_responses, "confirm")
    if answer is None:
        return InputRequired(
            {"confirm": InputRequired.elicit(f"Delete {filename}?", _CONFIRM_SCHEMA)}
        )
    return f"Delete {filename} confirmed: {answer.get('confirm') is True}"


@server.tool(task="optional")
async def multi_input(ctx: Context) -> str | InputRequired:
    """Asks two questions at once from inside the task; they may be answered one at a time."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    first, second = (
        _accepted(ctx.input_responses, "first"),
        _accepted(ctx.input_responses, "second"),
    )
    if first is None or second is None:
        return InputRequired(
            {
                "first": InputRequired.elicit("First input?", schema),
                "second": InputRequired.elicit("Second input?", schema),
            }
        )
    return f"Inputs received: {first.get('name')}, {second.get('name')}"


async def _ask_user_name(ctx: Context) -> InputRequired | None:
    """MRTR before the task: ask for the name until the retry carries it."""
    if _accepted(ctx.input_responses, "user_name") is None:
        return InputRequired(
            {"user_name": InputRequired.elicit("What is your name?", _NAME_SCHEMA)},
            state={"asked": "user_name"},
        )
    return None


@server.tool(task="required", before_task=_ask_user_name)
async def test_tool_with_task(ctx: Context) -> str:
    """Asks the user's name (MRTR, no task yet), then greets them from a task."""
    answer = _accepted(ctx.input_responses, "user_name") or {}
    await trio.sleep(0.5)
    return f"Hello, {answer.get('name')}! (greeted from a task)"


# -- cancellation (conformance/scenarios/: our cancellation scenarios) -----------------

#: How each cancellation probe's call ended, by probe name: ``running`` while it
#: works, then ``cancelled`` or ``completed``.  Shared by every client (the
#: modern era has no session to keep it in), so it is bounded in bytes: at
#: most PROBE_LIMIT names of at most PROBE_NAME_MAX characters, the oldest
#: forgotten first.
PROBES: dict[str, str] = {}
PROBE_LIMIT = 256
PROBE_NAME_MAX = 64


def _probe_name(probe: str) -> str:
    if not 0 < len(probe) <= PROBE_NAME_MAX:
        raise ToolError(f"probe must be 1 to {PROBE_NAME_MAX} characters")
    return probe


def _record(probe: str, outcome: str) -> None:
    PROBES.pop(probe, None)  # re-inserted last: the oldest are forgotten first
    PROBES[probe] = outcome
    while len(PROBES) > PROBE_LIMIT:
        del PROBES[next(iter(PROBES))]


@server.tool(task="optional")
async def test_cancellable_work(
    ctx: Context,
    probe: Annotated[str, "a name of the caller's choosing; test_cancellation_status tells"],
    seconds: Annotated[float, "how long to work unless cancelled"] = 30.0,
) -> str:
    """Works for *seconds*, reporting progress every 0.1 s, and records how it ended.

    Progress starts at once, so a client knows the tool runs before it
    cancels.  Whatever stops it early (``notifications/cancelled``, a closed
    stream, ``tasks/cancel``) leaves ``cancelled`` under *probe*; only a
    normal return leaves ``completed``.
    """
    name = _probe_name(probe)
    _record(name, "running")
    outcome = "cancelled"
    try:
        deadline = trio.current_time() + max(0.0, min(seconds, 600.0))
        step = 0
        while trio.current_time() < deadline:
            step += 1
            await ctx.report_progress(step, None, f"working on {name}")
            await checkpoint_cancelled()
            await trio.sleep(min(0.1, max(0.0, deadline - trio.current_time())))
        outcome = "completed"
    finally:
        _record(name, outcome)
    return f"completed {name}"


@server.tool(annotations={"readOnlyHint": True})
async def test_cancellation_status(
    ctx: Context, probe: Annotated[str, "the probe given to test_cancellable_work"]
) -> str:
    """How test_cancellable_work with this *probe* ended: running, cancelled, completed, unknown."""
    return PROBES.get(_probe_name(probe), "unknown")


# -- resources ---------------------------------------------------------------------


@server.resource("test://static-text", name="static-text", mime_type="text/plain")
async def static_text(ctx: Context) -> str:
    """A static text resource."""
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", mime_type="image/png")
async def static_binary(ctx: Context) -> bytes:
    """A static binary resource (a PNG image)."""
    return PNG


@server.resource("test://watched-resource", name="watched-resource", mime_type="text/plain")
async def watched_resource(ctx: Context) -> str:
    """A resource clients subscribe to."""
    return "Watched resource content"


@server.resource_template(
    "test://template/{id}/data", name="template-data", mime_type="application/json"
)
async def template_data(ctx: Context, id: str) -> str:
    """A resource template: the id substituted into the data."""
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


# -- prompts and completion ------------------------------------------------------------


@server.prompt()
async def test_simple_prompt(ctx: Context) -> str:
    """A simple prompt without arguments."""
    return "This is a simple prompt for testing."


@server.prompt()
async def test_prompt_with_arguments(
    ctx: Context,
    arg1: Annotated[str, "First test argument"],
    arg2: Annotated[str, "Second test argument"],
) -> str:
    """A prompt with arguments."""
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.completion("prompt", "test_prompt_with_arguments", "arg1")
async def complete_arg1(ctx: Context, value: str, context: dict[str, str]) -> list[str]:
    return [word for word in ("paris", "park", "party") if word.startswith(value)]


@server.prompt()
async def test_prompt_with_embedded_resource(
    ctx: Context, resourceUri: Annotated[str, "URI of the resource to embed"]
) -> list[Any]:
    """A prompt with an embedded resource."""
    return [
        EmbeddedResource(resourceUri, "Embedded resource content for testing.", "text/plain"),
        Text("Please process the embedded resource above."),
    ]


@server.prompt()
async def test_prompt_with_image(ctx: Context) -> list[Any]:
    """A prompt with an image."""
    return [Image(PNG, "image/png"), PromptMessage("user", "Please analyze the image above.")]


@server.prompt()
async def test_input_required_result_prompt(ctx: Context) -> str | InputRequired:
    """A prompt that asks for context first (MRTR on prompts/get)."""
    answer = _accepted(ctx.input_responses, "user_context")
    if answer is None:
        schema = {
            "type": "object",
            "properties": {"context": {"type": "string"}},
            "required": ["context"],
        }
        return InputRequired(
            {"user_context": InputRequired.elicit("What context should the prompt use?", schema)}
        )
    return f"Use this context: {answer.get('context')}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000, help="0 picks a free port")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    config = server_config(host=args.host, port=args.port)
    async with open_registry(grace_period=2.0) as registry, trio.open_nursery() as nursery:
        app = McpHttpApp(server, registry)
        binds = await nursery.start(partial(serve, app, config, handle_signals=True))
        print(f"conformance server: {binds[0]}/mcp", flush=True)


if __name__ == "__main__":
    try:
        trio.run(main)
    except* KeyboardInterrupt:
        pass
