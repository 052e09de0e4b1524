"""``MCP_AUTH_*`` set, or ``trio_mcp_cancel.oauth`` imported, without the ``auth``
extra: the error says what to install.

The Redis backend and the HTTP client already said ``pip install
'trio-mcp-cancel[...]'``; OAuth from the environment now says it the same
way (one helper, :func:`trio_mcp_cancel._public.missing_extra`).  The
missing libraries are simulated by blocking their import (``sys.modules``
entries of ``None``), and the package's ``_auth`` modules are put back
exactly as they were afterwards, so no other test sees second copies of
its classes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from trio_mcp_cancel.http import app_from_env
from trio_mcp_cancel.server import McpServer

_AUTH_PACKAGE = "trio_mcp_cancel._auth"


@pytest.fixture
def without_auth_extra() -> Iterator[None]:
    saved = {name: module for name, module in sys.modules.items() if name.startswith(_AUTH_PACKAGE)}
    blocked = {name: sys.modules.get(name) for name in ("jwt", "httpx2")}
    for name in saved:
        del sys.modules[name]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # "import jwt" raises ImportError
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n.startswith(_AUTH_PACKAGE)]:
            del sys.modules[name]
        sys.modules.update(saved)
        for name, module in blocked.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module


@pytest.mark.usefixtures("without_auth_extra")
def test_auth_variables_without_the_auth_extra_say_what_to_install() -> None:
    environ = {"MCP_AUTH_ISSUER": "https://issuer.test", "MCP_AUTH_AUDIENCE": "http://mcp.test/mcp"}
    with pytest.raises(ImportError) as raised:
        app_from_env(McpServer("no-auth-extra"), environ)
    message = str(raised.value)
    assert message.startswith("OAuth authorization (MCP_AUTH_ISSUER, MCP_AUTH_AUDIENCE set) needs ")
    assert message.endswith(": pip install 'trio-mcp-cancel[auth]'")


def test_the_redis_and_client_paths_say_it_the_same_way() -> None:
    from trio_mcp_cancel._public import missing_extra

    missing = ModuleNotFoundError("No module named 'coredis'", name="coredis")
    assert str(missing_extra("the Redis backend", "redis", missing)) == (
        "the Redis backend needs coredis: pip install 'trio-mcp-cancel[redis]'"
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("blocked", ["httpx2", "jwt"])
def test_importing_oauth_without_the_auth_extra_says_what_to_install(blocked: str) -> None:
    # A fresh interpreter: the import must fail the first time the package is
    # imported, as on a machine where the extra was never installed.
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "try:\n"
        "    import trio_mcp_cancel.oauth\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc, sep=': ')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        f"ImportError: trio_mcp_cancel.oauth needs {blocked}: pip install 'trio-mcp-cancel[auth]'"
    )
