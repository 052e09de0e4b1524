"""Whether a small whole response can be written in the request's own task.

Responses are normally written by a writer task of their own (see the
docstring of :mod:`.writer`): hypercorn writes to the socket inside a shielded
cancel scope, so a ``send()`` to a client that stopped reading can block a
request forever.  That protection costs a Trio task per response, the
largest item of the hot path's profile.  It is only needed when the write
*can* block.  Over HTTP/1.1 on a plain TCP socket served by hypercorn, a
write blocks only when the kernel's send buffer is full or too many bytes
wait unsent (``TCP_NOTSENT_LOWAT``); when the bytes queued on the socket
(``SIOCOUTQ``, ``SIOCOUTQNSD``) leave room for the whole response with a
wide margin, and no other write holds the connection's send lock, the write
completes at once, and :func:`can_write_now` says so.

Everything else (HTTP/2, where a write also waits on flow control; TLS;
another ASGI server; a platform other than Linux; any attribute this
does not find) answers ``False``, and the response goes through the writer
task as before.  The attribute walk is duck-typed and guarded, so a
hypercorn release that renames something only loses the shortcut.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import sys
import weakref
from typing import Any, Final

from .hypercorn_compat import idle_socket_of

__all__ = ["can_write_now"]

_LINUX: Final = sys.platform.startswith("linux")
_SIOCOUTQ: Final = 0x5411  # bytes queued on the socket, sent or not (TIOCOUTQ)
_SIOCOUTQNSD: Final = 0x894B  # of those, not sent yet
_NOTSENT_LOWAT: Final[int | None] = getattr(socket, "TCP_NOTSENT_LOWAT", None)
#: The send buffer also accounts per-packet overhead; stay well below it.
_SHARE: Final = 4
#: Per socket: ``_limits()``, read on its first response.
_LIMITS: Final[weakref.WeakKeyDictionary[Any, tuple[int, int | None]]] = weakref.WeakKeyDictionary()


def can_write_now(send: Any, size: int) -> bool:
    """Whether *size* bytes written through *send* now cannot block (see the module).

    Linux blocks a TCP write when the socket's buffer is full, and, when
    ``TCP_NOTSENT_LOWAT`` is set (Trio sets it to 16 KiB on every socket
    stream), as soon as that many bytes are queued and not sent yet: the
    common case of a client that stopped reading, its receive window
    closed.  So both must leave room for *size*.  The two limits are read
    once per socket; an empty queue (a client that read everything so far,
    the usual case between requests) then needs one ``ioctl``.
    """
    if not _LINUX:
        return False
    sock = idle_socket_of(send)  # hypercorn's internals are read there, not here
    if sock is None:
        return False
    try:
        fd = sock.fileno()
        if fd < 0:
            return False
        limits = _LIMITS.get(sock)
        if limits is None:
            limits = _LIMITS[sock] = _limits(sock)
        room, lowat = limits
        queued = _ioctl_int(fd, _SIOCOUTQ)
        if queued + size > room:
            return False
        if lowat is None:
            return queued == 0  # cannot tell sent from unsent: only an empty queue is sure
        if lowat <= 0:
            return True
        return size <= lowat and (queued == 0 or _ioctl_int(fd, _SIOCOUTQNSD) + size <= lowat)
    except (OSError, AttributeError, TypeError, ValueError):
        return False


def _limits(sock: Any) -> tuple[int, int | None]:
    """The bytes a socket's send buffer holds for our use, and its ``TCP_NOTSENT_LOWAT``.

    Read once: the kernel only ever grows a TCP send buffer by itself
    (autotuning), so the first value stays a safe bound.
    """
    sndbuf: int = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    lowat = None if _NOTSENT_LOWAT is None else sock.getsockopt(socket.IPPROTO_TCP, _NOTSENT_LOWAT)
    return sndbuf // _SHARE, lowat


def _ioctl_int(fd: int, request: int) -> int:
    value: int = struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))[0]
    return value
