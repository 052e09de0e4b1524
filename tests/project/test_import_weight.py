"""What importing the package costs: the author's modules load no HTTP stack and patch nothing.

A stdio server, a server a test drives in memory, and a tool module that
only imports the kernel never serve HTTP, so importing them must not load
hypercorn (and its h11/h2/wsproto) nor patch it: patches of another
library belong to the code that uses it, applied when it is used (the HTTP
app when it is made, ``serve()`` when it runs), never as a side effect of an
``import``.  Each check runs in a fresh interpreter, since this test
process has imported everything already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from _support.repo_paths import ROOT

#: Modules of the HTTP and WebSocket stacks; none is needed to write or serve a stdio server.
HTTP_STACK = ("hypercorn", "h11", "h2", "wsproto", "httpx", "httpcore", "httpcore2")

#: Sets ``patched``: hypercorn's methods the guards replace that are replaced now (see
#: transports/http/hypercorn_compat.py); a ``# UNPATCHED`` line of a check runs it.
UNPATCHED = """
from hypercorn.protocol.h2 import H2Protocol
from hypercorn.trio.tcp_server import TCPServer
patched = [
    f.__qualname__
    for f in (H2Protocol.__init__, TCPServer.run, TCPServer.__init__, TCPServer._read_data)
    if not f.__module__.startswith("hypercorn.")
]
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MCP_HYPERCORN_GUARD", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code).replace("# UNPATCHED\n", UNPATCHED)],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_runs(code: str) -> None:
    done = run_python(code)
    assert done.returncode == 0, done.stderr


@pytest.mark.subprocess
def test_importing_the_server_module_and_building_a_server_loads_no_http_stack() -> None:
    assert_runs(f"""
        import sys
        import trio_mcp_cancel.server
        assert 'hypercorn' not in sys.modules
        server = trio_mcp_cancel.server.McpServer("light")

        @server.tool
        async def echo(text: str) -> str:
            return text

        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {HTTP_STACK!r})
        assert not loaded, loaded
    """)


@pytest.mark.subprocess
def test_importing_the_server_and_the_http_app_patches_nothing_until_an_app_is_made() -> None:
    assert_runs("""
        import trio_mcp_cancel.server, trio_mcp_cancel.http
        from trio_mcp_cancel.transports.http import hypercorn_compat
        # UNPATCHED
        assert patched == [], patched
        assert not hypercorn_compat.status().connections

        # The app installs the guards when made (every deployment makes one), once.
        app = trio_mcp_cancel.http.McpHttpApp(trio_mcp_cancel.server.McpServer("patched"))
        first = hypercorn_compat.status()
        trio_mcp_cancel.http.McpHttpApp(trio_mcp_cancel.server.McpServer("again"))
        assert first.connections and hypercorn_compat.status() == first
        # UNPATCHED
        assert patched, "the app did not install the guards"
    """)


@pytest.mark.subprocess
def test_the_root_import_stays_light() -> None:
    assert_runs("""
        import sys
        import trio_mcp_cancel
        heavy = ("hypercorn", "h11", "httpx", "pydantic", "opentelemetry", "coredis")
        loaded = sorted({m.split(".")[0] for m in sys.modules} & set(heavy))
        assert not loaded, loaded
        ours = [m for m in sys.modules if m.startswith("trio_mcp_cancel")]
        # The kernel (registry, context, errors, namespaces): about 17 modules today.
        assert len(ours) <= 25, sorted(ours)
    """)


def test_the_checks_see_a_loaded_stack_and_a_patch() -> None:
    done = run_python("""
        import sys, hypercorn.config
        from trio_mcp_cancel.transports.http import hypercorn_compat
        hypercorn_compat.install(force=True)
        # UNPATCHED
        print("hypercorn" in sys.modules, patched)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(" ", 1) == [
        "True",
        "['_guarded_init', '_contained_run', 'apply.<locals>.idle_timer_init', "
        "'apply.<locals>.read_then_end_idle_timer']\n",
    ]
