"""hypercorn's Trio ``TCPServer`` three ways, as fresh classes: the idle-timer tests' servers.

``plain`` is hypercorn's own (its source, loaded again as a module of its
own, so the class the rest of the suite uses is never touched); ``carried``
is that with :func:`~trio_mcp_cancel.transports.http.hypercorn_idle.apply`;
``upstream`` is hypercorn's source with the patch proposed in
``docs/upstream/hypercorn-idle-timeout.md`` applied (by ``patch``), so the
report's diff is tested, not only described.  :func:`serving` runs
``hypercorn.trio.serve`` with one of them.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from trio_mcp_cancel.transports.http import hypercorn_idle

from .repo_paths import ROOT

__all__ = [
    "REPORT",
    "VARIANTS",
    "fresh_tcp_server_class",
    "report_diff",
    "serving",
    "tcp_server_class",
]

REPORT = ROOT / "docs" / "upstream" / "hypercorn-idle-timeout.md"
VARIANTS = ("plain", "carried", "upstream")
_loaded: dict[str, type] = {}
_fresh = itertools.count()


def report_diff() -> str:
    """The report's unified diff of ``trio/tcp_server.py`` (its first ``diff`` block)."""
    found = re.search(r"```diff\n(.*?)```", REPORT.read_text(encoding="utf-8"), re.S)
    assert found, f"no diff block in {REPORT}"
    return found.group(1)


def _hypercorn_source() -> str:
    spec = importlib.util.find_spec("hypercorn.trio.tcp_server")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text(encoding="utf-8")


def _patched(source: str, diff: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        original, patched = Path(tmp, "tcp_server.py"), Path(tmp, "patched.py")
        original.write_text(source, encoding="utf-8")
        subprocess.run(
            ["patch", "--quiet", "--force", "-o", str(patched), str(original)],
            input=diff.encode(),
            check=True,
            timeout=30,
        )
        return patched.read_text(encoding="utf-8")


def tcp_server_class(variant: str) -> type:
    """The ``TCPServer`` class of *variant* (one of :data:`VARIANTS`), loaded once."""
    if variant in _loaded:
        return _loaded[variant]
    source = _hypercorn_source()
    if variant == "upstream":
        source = _patched(source, report_diff())
    cls = _load(source, variant)
    if variant == "carried":
        assert hypercorn_idle.apply(cls) == ""
    _loaded[variant] = cls
    return cls


def fresh_tcp_server_class() -> type:
    """hypercorn's own ``TCPServer`` loaded anew: a class no other test holds."""
    return _load(_hypercorn_source(), f"fresh{next(_fresh)}")


def _load(source: str, variant: str) -> type:
    name = f"hypercorn.trio._tcp_server_{variant}"
    module: Any = type(sys)(name)
    module.__package__ = "hypercorn.trio"
    sys.modules[name] = module
    exec(compile(source, f"<hypercorn tcp_server, {variant}>", "exec"), module.__dict__)
    cls: type = module.TCPServer
    return cls


async def _with_lifespan(app: Callable[..., Awaitable[None]], scope: Any, *args: Any) -> None:
    """*app* for HTTP; hypercorn's lifespan messages answered (they would close it otherwise)."""
    if scope["type"] != "lifespan":
        await app(scope, *args)
        return
    receive, send = args
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


@asynccontextmanager
async def serving(
    app: Callable[..., Awaitable[None]],
    variant: str,
    *,
    keep_alive_timeout: float,
    shutdown: trio.Event | None = None,
    graceful_timeout: float = 30.0,
) -> AsyncIterator[int]:
    """Serve *app* with *variant*'s ``TCPServer`` on 127.0.0.1; yields the port.

    Setting *shutdown* starts hypercorn's graceful shutdown.
    """
    import hypercorn.trio.run
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = keep_alive_timeout
    config.graceful_timeout = graceful_timeout
    config.accesslog = None
    config.errorlog = None
    own = hypercorn.trio.run.TCPServer
    hypercorn.trio.run.TCPServer = tcp_server_class(variant)  # type: ignore[misc]
    try:
        async with trio.open_nursery() as nursery:
            trigger = shutdown.wait if shutdown is not None else None
            binds = await nursery.start(
                partial(serve, partial(_with_lifespan, app), config, shutdown_trigger=trigger)
            )
            yield int(binds[0].rsplit(":", 1)[1])
            nursery.cancel_scope.cancel()
    finally:
        hypercorn.trio.run.TCPServer = own  # type: ignore[misc]
