"""A server's metric instruments: the conventions' histograms, and the project's own counters.

Made once per :class:`~.server.ServerTelemetry` from its meter.  Every
attribute recorded on them comes from a small fixed set (see
:mod:`.names`), never from an id, a session or a principal.
"""

from __future__ import annotations

from typing import Any

import attrs

from . import names as n

__all__ = ["ServerMetrics"]


@attrs.frozen
class ServerMetrics:
    """The instruments; see each one's description."""

    duration: Any
    session_duration: Any
    in_flight: Any
    cancellations: Any
    flag_to_stop: Any
    overruns: Any
    refusals: Any
    tasks: Any
    backend_unavailable: Any
    threads_abandoned: Any
    process_groups_killed: Any

    @classmethod
    def create(cls, meter: Any) -> ServerMetrics:
        buckets = list(n.DURATION_BUCKETS)
        return cls(
            duration=meter.create_histogram(
                "mcp.server.operation.duration",
                unit="s",
                description="MCP request or notification duration as observed on the receiver.",
                explicit_bucket_boundaries_advisory=buckets,
            ),
            session_duration=meter.create_histogram(
                "mcp.server.session.duration",
                unit="s",
                description="The duration of the MCP session as observed on the MCP server.",
                explicit_bucket_boundaries_advisory=buckets,
            ),
            in_flight=meter.create_up_down_counter(
                "mcp_cancel.requests.in_flight",
                unit="{request}",
                description="Requests being answered, by method.",
            ),
            cancellations=meter.create_counter(
                "mcp_cancel.cancellations",
                unit="{request}",
                description="Cancelled requests, by who cancelled and how far it had to go.",
            ),
            flag_to_stop=meter.create_histogram(
                "mcp_cancel.cancel.flag_to_stop",
                unit="s",
                description="Seconds from the cancellation flag to the request's end.",
                explicit_bucket_boundaries_advisory=buckets,
            ),
            overruns=meter.create_counter(
                "mcp_cancel.overruns",
                unit="{request}",
                description="Requests still running past their hard cancel (reported live).",
            ),
            refusals=meter.create_counter(
                "mcp_cancel.limit.refusals",
                unit="{request}",
                description="Calls refused by an admission limit, by limit.",
            ),
            tasks=meter.create_counter(
                "mcp_cancel.tasks",
                unit="{task}",
                description="Tasks started (working) and ended, by status.",
            ),
            backend_unavailable=meter.create_counter(
                "mcp_cancel.backend.unavailable",
                unit="{event}",
                description="Times the shared backend went away, by operation.",
            ),
            threads_abandoned=meter.create_counter(
                "mcp_cancel.threads.abandoned",
                unit="{thread}",
                description="Worker threads left running by a hard-cancelled request.",
            ),
            process_groups_killed=meter.create_counter(
                "mcp_cancel.process_groups.killed",
                unit="{process_group}",
                description="Child process groups killed by a cancelled request.",
            ),
        )
