"""The choices ``server.run()`` takes, apart from the runner (which imports hypercorn).

:class:`~trio_mcp_cancel.server.McpServer` names them in its ``run``
signature, and importing the server must not import the HTTP stack, so
they live here, below both.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, Literal

__all__ = ["FROM_ENVIRONMENT", "FromEnvironment", "Transport"]

#: ``"streamable-http"`` is the MCP specification's name of ``"http"`` (the official SDK's too).
Transport = Literal["stdio", "http", "streamable-http"]


class FromEnvironment(Enum):
    """The type of :data:`FROM_ENVIRONMENT` (an enum, so type checkers know its one value)."""

    token = 0


#: ``grace_period=`` default: ``MCP_GRACE_PERIOD`` if set, else 5 seconds (what the CLI does).
FROM_ENVIRONMENT: Final = FromEnvironment.token
