"""docs/reference.md names every option the code has: a new parameter without its row fails here.

The reference is written by hand (a table row says what an option is for,
which a signature cannot), and this test keeps it complete: each section
must mention, in backticks, every parameter of the callable it documents,
every field of ``RegistryConfig``, every ``MCP_*`` variable ``app_from_env``
reads, every setting ``server_config()`` changes from hypercorn's defaults,
and every flag of ``trio-mcp-cancel run``.
"""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypercorn.config import Config

from trio_mcp_cancel import RegistryConfig
from trio_mcp_cancel._gateway.upstream import UpstreamOptions
from trio_mcp_cancel._run import cli
from trio_mcp_cancel.client import (
    ClientCredentialsAuth,
    ClientHandlers,
    ClientOptions,
    open_http_client,
)
from trio_mcp_cancel.http import HttpLimits, McpHttpApp, serve, server_config
from trio_mcp_cancel.middleware import RateLimit, RequestLog, ResponseCache, Timing
from trio_mcp_cancel.oauth import IntrospectionVerifier, JwtVerifier, OAuthResource
from trio_mcp_cancel.server import ConnectionLimits, McpServer, ServerLimits
from trio_mcp_cancel.stdio import run_stdio, serve_mcp_stdio
from trio_mcp_cancel.testing import open_test_client
from trio_mcp_cancel.transports.http import deploy
from trio_mcp_cancel.websocket import serve_mcp_websocket

from _support.repo_paths import ROOT

REFERENCE = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
_SECTIONS = dict(
    (title.strip(), body)
    for title, body in re.findall(r"(?m)^## (.*)\n((?:(?!^## ).*\n?)*)", REFERENCE)
)

#: Parameters that are plumbing, not options a user sets.
_NOT_OPTIONS = {"self", "task_status"}


def _parameters(*functions: Callable[..., Any]) -> set[str]:
    names: set[str] = set()
    for function in functions:
        names |= {
            name for name in inspect.signature(function).parameters if name not in _NOT_OPTIONS
        }
    return names


def _missing(section: str, names: Iterable[str]) -> list[str]:
    body = _SECTIONS[section]
    return sorted(n for n in names if f"`{n}`" not in body and f"`**{n}`" not in body)


def _changed_hypercorn_settings() -> set[str]:
    ours, theirs = server_config(), Config()
    changed = set()
    for name in dir(Config):
        # bind: the host and port arguments; log: derived from errorlog and accesslog
        if name.startswith("_") or name in ("bind", "log"):
            continue
        try:
            value = getattr(ours, name)
        except Exception:
            continue
        if callable(value):
            continue
        if value != getattr(theirs, name):
            changed.add(name)
    return changed


def _cli_flags() -> set[str]:
    parser = cli._parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = commands.choices["run"]
    return {
        flag
        for action in run._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }


_CHECKS: dict[str, Callable[[], set[str]]] = {
    "McpServer": lambda: _parameters(McpServer.__init__),
    "McpServer.tool": lambda: _parameters(McpServer.tool),
    "Middleware": lambda: {
        f"{cls.__name__}({f.name})"
        for cls in (RequestLog, Timing, RateLimit, ResponseCache)
        for f in attrs.fields(cls)
        if f.init
    },
    "ServerLimits": lambda: {f.name for f in attrs.fields(ServerLimits)},
    "RegistryConfig / open_registry": lambda: {f.name for f in attrs.fields(RegistryConfig)},
    "Mount and proxy": lambda: (
        (_parameters(McpServer.mount, McpServer.proxy) - {"options", "cls"})
        | {f.name for f in attrs.fields(UpstreamOptions)}
    ),
    "McpHttpApp": lambda: _parameters(McpHttpApp.__init__),
    "ConnectionLimits": lambda: {f.name for f in attrs.fields(ConnectionLimits)},
    "HttpLimits": lambda: {f.name for f in attrs.fields(HttpLimits)},
    "McpServer.run": lambda: _parameters(McpServer.run),
    "serve and server_config": lambda: (
        _changed_hypercorn_settings() | (_parameters(serve, server_config) - {"app", "overrides"})
    ),
    "app_from_env: environment variables": lambda: set(
        re.findall(r"\bMCP_[A-Z_]+\b", Path(deploy.__file__).read_text(encoding="utf-8"))
    ),
    "stdio: run_stdio and serve_mcp_stdio": lambda: (
        _parameters(run_stdio, serve_mcp_stdio) - {"server"}
    ),
    "WebSocket: serve_mcp_websocket": lambda: _parameters(serve_mcp_websocket) - {"server"},
    "open_test_client": lambda: _parameters(open_test_client) - {"server"},
    "The MCP client: open_http_client": lambda: (
        (_parameters(open_http_client) - {"options"})
        | set(ClientOptions.__annotations__)
        | {f.name for f in attrs.fields(ClientHandlers)}
        | {f.name for f in attrs.fields(ClientCredentialsAuth) if f.init}
    ),
    "The command line: trio-mcp-cancel run": _cli_flags,
    "OAuthResource and token verifiers": lambda: {
        f.name
        for cls in (OAuthResource, JwtVerifier, IntrospectionVerifier)
        for f in attrs.fields(cls)
        if f.init
    },
}


@pytest.mark.parametrize("section", sorted(_CHECKS))
def test_the_reference_documents_every_option(section: str) -> None:
    assert section in _SECTIONS, f"docs/reference.md has no section '## {section}'"
    names = _CHECKS[section]()
    assert names, "found nothing to check: the test is looking in the wrong place"
    missing = _missing(section, names)
    assert not missing, f"docs/reference.md, '## {section}', lacks a row for: {missing}"


def test_the_checks_would_notice_a_missing_option() -> None:
    assert _missing("McpServer", {"page_size", "no_such_option"}) == ["no_such_option"]
    assert "graceful_timeout" in _changed_hypercorn_settings()
    assert "--workers" in _cli_flags()


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as '-'."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def test_the_contents_list_every_section_in_order_and_each_link_works() -> None:
    headings = re.findall(r"(?m)^## (.*)$", REFERENCE)
    first = REFERENCE.index("\n## ")
    links = re.findall(r"(?m)^- \[[^\]]+\]\(#([^)]+)\)$", REFERENCE[:first])
    assert links == [_github_anchor(h) for h in headings]


def test_the_anchor_rule_is_githubs() -> None:
    assert _github_anchor("RegistryConfig / open_registry") == "registryconfig--open_registry"
    assert _github_anchor("The command line: trio-mcp-cancel run") == (
        "the-command-line-trio-mcp-cancel-run"
    )
