"""Configure an :class:`McpHttpApp` from environment variables, for ``hypercorn module:app``.

An ASGI server imports ``module:app`` in every worker process, so the app
must be built at import time, without a running Trio: configuration comes
from the environment, and the registry and backend are opened later, by
the ASGI lifespan.  :func:`app_from_env` reads:

``MCP_GRACE_PERIOD``
    seconds from a cancellation's flag to its hard cancel (default ``5``;
    ``none``: never hard-cancel).
``MCP_REDIS_URL``
    ``redis://host:port/db``: share task records and cancellation requests
    through Redis (extra ``redis``); unset: this process only, in memory.
    ``redis+sentinel://host:port[,host:port...]/service[/db]`` follows the
    primary the Sentinels name; ``redis+cluster://host:port`` uses a Redis
    Cluster (``rediss`` variants for TLS).
``MCP_REDIS_PREFIX``
    prefix of the Redis keys and channel (default ``tmc``).
``MCP_REDIS_HOT_TIMEOUT``
    seconds a Redis operation a request waits for may take before the
    circuit breaker opens (default ``0.1``; see :class:`RedisBackend`).
``MCP_INSTANCE_ID``
    this process's id in the shared backend (letters, digits, ``._-``, at
    most 64; default: random).  ``trio-mcp-cancel run --workers N`` gives
    each worker its own, so that when one dies it can settle that worker's
    tasks ``failed`` at once; two live processes must never share one.
``MCP_PATH``
    the endpoint (default ``/mcp``).
``MCP_HEALTH_PATH``, ``MCP_READY_PATH``
    the liveness and readiness probes (defaults ``/healthz`` and
    ``/readyz``; ``none`` turns one off; see :mod:`.health`).
``MCP_ALLOWED_ORIGINS``
    comma-separated ``Origin`` values to accept (default: localhost only).
``MCP_MAX_REQUEST_TIME``
    seconds after which a tool call is cancelled by the server (default:
    none).  ``trio-mcp-cancel run`` and ``server.run()`` apply it on stdio
    too (:func:`limits_from_env`), with the grace period, the task TTL and
    the state secret (:func:`server_settings_from_env`).
``MCP_RESUME_WINDOW``
    seconds a dropped legacy SSE stream may be resumed (``GET`` with
    ``Last-Event-ID``) before its call is cancelled as a disconnect (default
    ``5``; ``none``: streams are not resumable, a drop cancels at once).
``MCP_TASK_TTL``
    seconds a task record lives after creation (default ``3600``).
``MCP_STATE_SECRET``
    the key that seals MRTR ``requestState`` values, shared by every
    worker (else a retry that lands on another worker is refused): base64,
    URL-safe or standard alphabet, padding optional, of at least 32 bytes,
    e.g. ``python -c "import secrets; print(secrets.token_urlsafe(32))"``.
    Unset: a random key per process (one worker only).
``MCP_STATE_SECRET_PREVIOUS``
    the secret before a rotation, same format: it still opens states
    (never seals them).  Rotate by moving the old value here and setting a
    new ``MCP_STATE_SECRET``; keep it for at least one state TTL (600 s by
    default), then unset it.  Needs ``MCP_STATE_SECRET``.
``MCP_AUTH_ISSUER``, ``MCP_AUTH_AUDIENCE``
    turn on OAuth authorization (extra ``auth``; :mod:`trio_mcp_cancel.oauth`):
    the authorization server's issuer URL (its JWKS and introspection
    endpoint found through its RFC 8414 / OpenID metadata) and this
    server's URL (the Protected Resource Metadata's ``resource``, the
    audience every token must name).  Both or neither.
``MCP_AUTH_SCOPES``
    scopes every request needs (space- or comma-separated).
``MCP_AUTH_JWKS_URI``
    the issuer's key set, when its metadata should not be asked.
``MCP_AUTH_CLIENT_ID``, ``MCP_AUTH_CLIENT_SECRET``
    this server's credentials at the authorization server: tokens that
    are not JWTs are then checked by introspection (RFC 7662).
``MCP_AUTH_INTROSPECTION_URL``
    the introspection endpoint, when its metadata should not be asked.

A malformed value raises :class:`ValueError` naming the variable, so a
worker fails at startup rather than serving with a setting silently ignored.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from ..._core.registry import RegistryConfig
from ..._protocol.dispatcher import Served
from ..._protocol.mrtr import secret_from_text
from ..._public import missing_extra
from ..._tasks import Tasks
from ...backends.base import Backend
from ..limits import ConnectionLimits
from .app import McpHttpApp

__all__ = ["app_from_env", "backend_from_env", "limits_from_env", "server_settings_from_env"]

#: What ``MCP_REDIS_URL`` may start with (see :mod:`trio_mcp_cancel.backends.redis`).
_REDIS_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)

#: What ``MCP_INSTANCE_ID`` may be: it becomes part of Redis keys and log lines.
_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def seconds_setting(environ: Mapping[str, str], name: str, default: float | None) -> float | None:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() == "none":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds or 'none', not {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, not {raw!r}")
    return value


def backend_from_env(environ: Mapping[str, str] | None = None) -> Backend | None:
    """The Redis backend when ``MCP_REDIS_URL`` is set, else ``None`` (in memory)."""
    environ = os.environ if environ is None else environ
    url = environ.get("MCP_REDIS_URL", "").strip()
    if not url:
        return None
    if not url.startswith(_REDIS_SCHEMES):
        raise ValueError(
            f"MCP_REDIS_URL must be a redis://, rediss://, unix://, redis+sentinel://"
            f" or redis+cluster:// URL, not {url!r}"
        )
    instance = environ.get("MCP_INSTANCE_ID", "").strip() or None
    if instance is not None and _INSTANCE_ID.fullmatch(instance) is None:
        raise ValueError(
            f"MCP_INSTANCE_ID must be 1-64 letters, digits, '.', '_' or '-', not {instance!r}"
        )
    from ...backends.redis import RedisBackend  # the optional extra, only when asked for

    prefix = environ.get("MCP_REDIS_PREFIX", "tmc") or "tmc"
    hot = seconds_setting(environ, "MCP_REDIS_HOT_TIMEOUT", RedisBackend.HOT_TIMEOUT)
    if hot is None or hot <= 0:
        raise ValueError("MCP_REDIS_HOT_TIMEOUT must be a number of seconds > 0")
    return RedisBackend(url, prefix=prefix, instance_id=instance, hot_timeout=hot)


def _state_secret_from_env(server: Served, environ: Mapping[str, str]) -> None:
    """Seal ``requestState`` with ``MCP_STATE_SECRET`` (and open with the previous one)."""
    secret = environ.get("MCP_STATE_SECRET", "").strip()
    previous = environ.get("MCP_STATE_SECRET_PREVIOUS", "").strip()
    if not secret:
        if previous:
            raise ValueError("MCP_STATE_SECRET_PREVIOUS is set but MCP_STATE_SECRET is not")
        return
    signer = server.dispatcher.registration.state_signer
    signer.secret = secret_from_text(secret, "MCP_STATE_SECRET")
    signer.previous = secret_from_text(previous, "MCP_STATE_SECRET_PREVIOUS") if previous else None


def limits_from_env(environ: Mapping[str, str]) -> ConnectionLimits:
    """The :class:`ConnectionLimits` the environment sets (``MCP_MAX_REQUEST_TIME``).

    Shared by HTTP (:func:`app_from_env`) and ``trio-mcp-cancel run``'s
    stdio, so a setting means the same on every transport.
    """
    max_request_time = seconds_setting(environ, "MCP_MAX_REQUEST_TIME", None)
    if max_request_time == 0:
        raise ValueError("MCP_MAX_REQUEST_TIME must be a number of seconds > 0 or 'none'")
    return ConnectionLimits(max_request_time=max_request_time)


def server_settings_from_env(server: Served, environ: Mapping[str, str]) -> None:
    """Apply the server's own settings (``MCP_TASK_TTL``, ``MCP_STATE_SECRET[_PREVIOUS]``).

    They live on *server*, not on a transport, so stdio honours them as
    HTTP does.
    """
    ttl = seconds_setting(environ, "MCP_TASK_TTL", 3600.0)
    tasks = server.dispatcher.extension(Tasks)
    if tasks is not None:
        tasks.manager.ttl_ms = None if ttl is None else int(ttl * 1000)
    _state_secret_from_env(server, environ)


def _probe_path(environ: Mapping[str, str], name: str, default: str) -> str | None:
    """A probe's path from *name*: unset or empty, *default*; ``none``, no probe."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lower() == "none":
        return None
    if not raw.startswith("/"):
        raise ValueError(f"{name} must start with '/' or be 'none', not {raw!r}")
    return raw


#: Any of these set turns authorization on (see :mod:`..._auth.env`).
_AUTH_VARIABLES = (
    "MCP_AUTH_ISSUER",
    "MCP_AUTH_AUDIENCE",
    "MCP_AUTH_SCOPES",
    "MCP_AUTH_JWKS_URI",
    "MCP_AUTH_CLIENT_ID",
    "MCP_AUTH_CLIENT_SECRET",
    "MCP_AUTH_INTROSPECTION_URL",
)


def app_from_env(
    server: Served, environ: Mapping[str, str] | None = None, **overrides: Any
) -> McpHttpApp:
    """An :class:`McpHttpApp` for *server* configured from the environment (see above).

    *overrides* are further :class:`McpHttpApp` keywords; they win over the
    environment.
    """
    environ = os.environ if environ is None else environ
    grace = seconds_setting(environ, "MCP_GRACE_PERIOD", 5.0)
    options: dict[str, Any] = {
        "registry_config": RegistryConfig(grace_period=grace),
        "path": environ.get("MCP_PATH", "/mcp") or "/mcp",
        "limits": limits_from_env(environ),
        "backend": backend_from_env(environ),
        "resume_window": seconds_setting(environ, "MCP_RESUME_WINDOW", 5.0),
    }
    origins = environ.get("MCP_ALLOWED_ORIGINS", "").strip()
    if origins:
        options["allowed_origins"] = [o.strip() for o in origins.split(",") if o.strip()]
    if not options["path"].startswith("/"):
        raise ValueError(f"MCP_PATH must start with '/', not {options['path']!r}")
    options["health_path"] = _probe_path(environ, "MCP_HEALTH_PATH", "/healthz")
    options["ready_path"] = _probe_path(environ, "MCP_READY_PATH", "/readyz")
    server_settings_from_env(server, environ)
    if asked := [name for name in _AUTH_VARIABLES if environ.get(name, "").strip()]:
        try:  # the optional `auth` extra, only when asked for
            from ..._auth.env import oauth_from_env
        except ImportError as exc:
            feature = f"OAuth authorization ({', '.join(asked)} set)"
            raise missing_extra(feature, "auth", exc) from exc
        options["auth"] = oauth_from_env(environ)
    options.update(overrides)
    return McpHttpApp(server, **options)
