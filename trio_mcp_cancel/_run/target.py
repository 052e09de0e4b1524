"""Import ``MODULE:ATTR`` and turn what it names into what a transport serves.

ATTR may be an :class:`~trio_mcp_cancel.server.McpServer` (served as it is
on stdio; over HTTP through :func:`~trio_mcp_cancel.http.app_from_env`, so
the ``MCP_*`` variables apply) or an ASGI app such as the one
``app_from_env`` built (over HTTP as it is; on stdio its ``server``).
Every mistake is a :class:`TargetError` with a message for the command
line, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Iterator
from typing import TypeGuard, cast

from hypercorn.utils import is_asgi

from .._core.errors import NoRegistry
from .._core.registry import RegistryConfig
from .._protocol.dispatcher import Dispatcher, Served
from ..transports.http.app import McpHttpApp
from ..transports.http.deploy import app_from_env
from ..transports.http.serving import AsgiApp

__all__ = ["TargetError", "http_app", "load", "stdio_server", "stdout_to_stderr"]


class TargetError(Exception):
    """``MODULE:ATTR`` does not name something this command can serve."""


def load(spec: str) -> object:
    """The object *spec* (``package.module:attr``) names, importing its module.

    The working directory is importable, as with ``python -m`` (a console
    script would not otherwise see ``examples.slow_server`` there).
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected MODULE:ATTR (e.g. examples.slow_server:app), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module_name.startswith(exc.name):
            raise  # a missing dependency of the module: its own traceback says more
        raise TargetError(f"no module named {module_name!r}") from None
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    return found


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send ``print()`` and other writes to ``sys.stdout`` to stderr for the duration.

    Around the import of a target served on stdio: there stdout is the
    JSON-RPC stream the host parses, and a module-level ``print()`` would
    corrupt it before the transport claims file descriptor 1 (the
    transport then guards it while serving; see ``transports.stdio``).
    """
    if sys.stdout is not None:
        sys.stdout.flush()  # nothing written before belongs to the import
    with contextlib.redirect_stdout(sys.stderr):
        try:
            yield
        finally:
            if sys.stderr is not None:
                sys.stderr.flush()


def _not_servable(found: object, serves: str) -> TargetError:
    """The one message both transports give for a target they cannot serve.

    A class or a function is the usual slip (``server:McpServer``, or a
    factory not called), so it is named as such, with the likely fix.
    """
    if isinstance(found, type):
        what = f"the class {found.__qualname__} (serve an instance of it)"
    elif inspect.iscoroutinefunction(found):
        name = getattr(found, "__qualname__", getattr(found, "__name__", "?"))
        what = (
            f"the async function {name}, which does not take (scope, receive, send)"
            " (a tool? serve the McpServer it is registered on)"
        )
    elif inspect.isroutine(found):
        name = getattr(found, "__qualname__", getattr(found, "__name__", "?"))
        what = f"the function {name} (serve what it returns, assigned to a module variable)"
    else:
        what = type(found).__name__
    return TargetError(f"expected {serves}, not {what}")


def _takes_asgi_call(found: object) -> bool:
    """Whether *found* can be called as ``app(scope, receive, send)``.

    hypercorn takes any coroutine function for an ASGI 3 app, so a tool
    (``async def forecast(city)``) named by mistake would be served and fail
    on every request; its signature says so before anything starts.
    """
    try:
        inspect.signature(found).bind(None, None, None)  # type: ignore[arg-type]
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): leave it to hypercorn
        return True
    return True


def http_app(found: object, registry_config: RegistryConfig | None = None) -> AsgiApp:
    """An ASGI app: *found* itself, or ``app_from_env`` of an ``McpServer``.

    *registry_config* (the runner's grace period) applies to an
    ``McpServer`` only: an app built already has its registry settings.
    An ASGI app is what hypercorn itself takes for one (a coroutine
    function, or an instance whose ``__call__`` is one); anything else
    would be served as WSGI and fail on its first request (a class whose
    ``__call__`` is a coroutine function passes that test, so classes are
    refused first).
    """
    if isinstance(found, McpHttpApp):
        _require_own_registry(found)
    if not isinstance(found, type) and is_asgi(found) and _takes_asgi_call(found):
        return cast(AsgiApp, found)
    if _is_server(found):
        if registry_config is None:
            return app_from_env(found)
        return app_from_env(found, registry_config=registry_config)
    raise _not_servable(found, "an McpServer or an ASGI app")


def _require_own_registry(app: McpHttpApp) -> None:
    """Refuse an app given a registry: none can be running before this command runs Trio.

    Served anyway, its lifespan would refuse to start (``the registry given
    to McpHttpApp is not running``) after hypercorn said it was running;
    said here it is one line before anything starts.
    """
    try:
        given = app.registry  # the registry given, else the one around (none here)
    except NoRegistry:
        return  # none given: the app opens its own in its lifespan
    if not given.running:
        raise TargetError(
            "the McpHttpApp was given a registry=, which is not running (nothing can run it"
            " before this command starts Trio): build it without registry= and it opens its own"
        )


def stdio_server(found: object) -> Served:
    """The ``McpServer`` to serve on stdio: *found*, or the server of an ``McpHttpApp``."""
    if isinstance(found, McpHttpApp):
        return found.server
    if _is_server(found):
        return found
    raise _not_servable(found, "an McpServer or an McpHttpApp (stdio serves its server)")


def _is_server(found: object) -> TypeGuard[Served]:
    """An ``McpServer``, told by its dispatcher (this module sits below the server
    class, which imports it when ``run()`` is called, so it cannot name the class);
    an app, which has one too, is an app (checked before)."""
    dispatcher = None if isinstance(found, type) else getattr(found, "dispatcher", None)
    return isinstance(dispatcher, Dispatcher)
