"""A Redis outage that ends many sessions logs it a bounded number of times.

Each session ended while the shared backend is away (evicted, deleted,
expired) cannot be announced to the other workers; saying so once per
session flooded the log.  The warning is rate-limited like the other
outage logs: the first one, then one per interval with a count.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import pytest

from trio_mcp_cancel.backends.base import BackendUnavailable, BusMessage
from trio_mcp_cancel.transports.http.sessions import Session
from trio_mcp_cancel.transports.http.shared import SessionSharing


@attrs.define
class DownRecords:
    shared: bool = True

    async def delete(self, key: str, *, tenant: str | None = None) -> None:
        raise BackendUnavailable("redis is down")


@attrs.define
class DownBus:
    shared: bool = True

    async def publish(self, message: BusMessage) -> None:
        raise BackendUnavailable("redis is down")


@attrs.define
class DownBackend:
    sessions: DownRecords = attrs.field(factory=DownRecords)
    bus: DownBus = attrs.field(factory=DownBus)


async def test_sessions_ended_during_an_outage_log_one_warning_not_one_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend: Any = DownBackend()
    sharing = SessionSharing(backend, idle_timeout=60.0, max_concurrent_calls=8)
    with caplog.at_level(logging.DEBUG, logger="trio_mcp_cancel.http"):
        for n in range(200):
            await sharing.end(Session(f"s{n}", None, 0.0, "ip:1"))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "session end not shared with other workers" in warnings[0].getMessage()
