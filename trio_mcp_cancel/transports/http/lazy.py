"""Run a coroutine in the current task, doing something only if it ever suspends.

A cancellable tool call needs a watcher task (for ``http.disconnect``, the
keep-alives and the time limit) only while the tool is *suspended*: a tool
that finishes without ever yielding to the scheduler (a no-op, a lookup in
memory) cannot be disconnected from, kept alive or timed out in the middle,
so spawning the watcher for it is pure cost (a Trio task per call, the
largest item of the hot path's profile).  :func:`await_then` runs the
coroutine exactly as ``await`` would, in the same task and the same cancel
scopes, and calls *on_suspend* once, just before the coroutine's first
suspension reaches the scheduler.  (One visible difference: introspection
that walks a task's await chain, ``Task.iter_await_frames()``, stops at
this frame instead of continuing into the tool.)
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["await_then"]

T = TypeVar("T")


@types.coroutine
def await_then(
    coro: Coroutine[Any, Any, T], on_suspend: Callable[[], object]
) -> Generator[Any, Any, T]:
    """``await coro``, calling *on_suspend()* once before it first suspends.

    The same protocol as ``yield from`` (PEP 380): whatever the coroutine
    yields goes to the scheduler, whatever the scheduler sends or throws
    goes back in, and closing this closes the coroutine.
    """
    try:
        value = coro.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    try:
        on_suspend()
    except BaseException:
        coro.close()
        raise
    while True:
        try:
            sent = yield value
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                value = coro.throw(exc)
            except StopIteration as done:
                result = done.value
                return result
        else:
            try:
                value = coro.send(sent)
            except StopIteration as done:
                result = done.value
                return result
