"""``trio-mcp-cancel call TARGET TOOL [--args JSON | key=value ...]``: call one tool.

The result's text content is printed as it is (``--json``: the whole
result); a result with ``isError`` exits 1.  ``key=value`` arguments take
their type from the tool's ``inputSchema`` (:mod:`.arguments`), so
``days=3`` is the integer 3 for an integer parameter and the string ``"3"``
for a string one.  Progress goes to stderr, a one-line bar on a terminal
and plain lines otherwise (a log, a pipe).

Ctrl-C cancels the call the way its transport and era need (the client
does it when the call's scope is cancelled: ``notifications/cancelled``,
or the request's stream closed on modern HTTP, or ``tasks/cancel``), waits
a moment for that to reach the server, says ``cancelled`` on stderr and
exits 130, the shell's status for an interrupted command.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import attrs
import trio

from .._client.errors import McpError
from . import connect
from .arguments import parse_arguments

__all__ = ["ProgressPrinter", "add_parser", "main"]

#: The exit status of a command interrupted by SIGINT (128 + 2), as shells report it.
INTERRUPTED = 130


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "call",
        help="call a tool and print its result",
        description="Call TOOL on TARGET and print its result; Ctrl-C cancels the call.",
    )
    connect.add_target_options(parser)
    parser.add_argument("tool", metavar="TOOL", help="the tool's name")
    parser.add_argument(
        "arguments",
        metavar="key=value",
        nargs="*",
        help="an argument, typed by the tool's input schema (JSON literals for the rest)",
    )
    parser.add_argument("--args", dest="json_args", metavar="JSON", help="the arguments as JSON")


def main(args: argparse.Namespace) -> int:
    async def body() -> int:
        async with connect.open_target(args.target, args.era) as client:
            tools = {str(tool.get("name")): tool for tool in await client.list_tools()}
            if args.tool not in tools:
                known = ", ".join(sorted(tools)) or "none"
                raise connect.UsageError(f"unknown tool {args.tool!r} (its tools: {known})")
            arguments = parse_arguments(
                tools[args.tool].get("inputSchema"), args.json_args, args.arguments
            )
            progress = ProgressPrinter(sys.stderr, sys.stderr.isatty())
            interrupted = False
            result: Mapping[str, Any] = {}
            failure: McpError | None = None
            with trio.CancelScope() as scope, trio.open_signal_receiver(signal.SIGINT) as signals:
                async with trio.open_nursery() as nursery:

                    async def on_sigint() -> None:
                        nonlocal interrupted
                        async for _ in signals:
                            interrupted = True
                            scope.cancel()

                    nursery.start_soon(on_sigint)
                    try:
                        result = await client.call_tool(args.tool, arguments, progress=progress)
                    except McpError as exc:  # raised below, not wrapped in the nursery's group
                        failure = exc
                    nursery.cancel_scope.cancel()
            progress.done()
            if failure is not None:
                raise failure
            if interrupted:
                await connect.settle_cancel(client)
                print("cancelled", file=sys.stderr)
                return INTERRUPTED
        return _print_result(result, as_json=args.json)

    return connect.run_client_command("call", body, on_interrupt=_interrupted_early)


def _interrupted_early() -> int:
    """Ctrl-C before the call was sent (connecting, listing): nothing to cancel yet."""
    print("cancelled", file=sys.stderr)
    return INTERRUPTED


def _print_result(result: Mapping[str, Any], *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        for item in result.get("content") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                print(item.get("text", ""))
            else:  # an image, audio, a resource: what it is, not its base64
                print(json.dumps({k: v for k, v in item.items() if k not in ("data", "blob")}))
        if not result.get("content") and "structuredContent" in result:
            print(json.dumps(result["structuredContent"], indent=2))
    return 1 if result.get("isError") else 0


@attrs.define(eq=False)
class ProgressPrinter:
    """Shows each ``notifications/progress`` on *stream*.

    On a terminal one line redrawn in place (``\\r``), a bar when the total
    is known; elsewhere one plain line per notification, which a log keeps
    readable.  Values come from the server, so they are shown as numbers
    only when they are numbers, and a message is cut to one short line.
    """

    stream: TextIO
    tty: bool
    _drawn: bool = False

    WIDTH = 30
    MESSAGE = 60

    def __call__(self, params: Mapping[str, Any]) -> None:
        progress, total = params.get("progress"), params.get("total")
        message = params.get("message")
        text = " ".join(str(message).split())[: self.MESSAGE] if message is not None else ""
        if not isinstance(progress, int | float) or not _number(progress):
            return
        if isinstance(total, int | float) and _number(total) and total > 0:
            share = max(0.0, min(1.0, progress / total))
            counts = f"{progress:g}/{total:g}"
            if self.tty:
                filled = round(share * self.WIDTH)
                bar = "#" * filled + "-" * (self.WIDTH - filled)
                self._draw(f"[{bar}] {share:4.0%} {counts} {text}")
            else:
                self._line(f"progress {counts} ({share:.0%}) {text}")
        elif self.tty:
            self._draw(f"[{progress:g}] {text}")
        else:
            self._line(f"progress {progress:g} {text}")

    def done(self) -> None:
        """End the redrawn line, so what follows starts on a line of its own."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def _draw(self, line: str) -> None:
        self.stream.write("\r\x1b[2K" + line.rstrip())
        self.stream.flush()
        self._drawn = True

    def _line(self, line: str) -> None:
        self.stream.write(line.rstrip() + "\n")
        self.stream.flush()


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
