"""Serving an app under test for the hostile rows (``bench_hostile`` and its ``hostile_*`` parts).

One place for the hypercorn settings those rows share, so a row added in
its own module serves exactly like the others.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve


@asynccontextmanager
async def serving(app: Any, keep_alive: float | None = None) -> AsyncIterator[int]:
    """Serve *app* on a random port of 127.0.0.1; yield the port."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = None
    config.accesslog = None
    config.graceful_timeout = 1.0
    config.backlog = 1024  # a burst of connects must not wait for SYN retries
    if keep_alive is not None:
        config.keep_alive_timeout = keep_alive
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config))
        yield int(binds[0].rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


async def until(condition: Callable[[], bool]) -> None:
    """Poll *condition* (state of the server under test, which has no event for it)."""
    while True:
        if condition():
            return
        await trio.sleep(0.01)
