"""A server-wide and per-tenant count of something admitted, with its caps.

:class:`~.dispatch.McpServer` keeps two: one for tool calls (and the other
requests that run tracked work), one for open ``subscriptions/listen``
streams.  A listen stream is not a call: it is meant to stay open for
hours, so counting it against the call caps would let a client's listeners
starve its own calls, and a call-sized cap would be far too low for them.
"""

from __future__ import annotations

import attrs

__all__ = ["Slots"]


@attrs.define(eq=False)
class Slots:
    """How many are held, in total and per tenant; ``None`` caps nothing.

    *tenant* ``None`` (stdio, tests: nobody to count it against) is counted
    in the total only.
    """

    total_cap: int | None
    tenant_cap: int | None
    held: int = 0
    by_tenant: dict[str, int] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for cap in (self.total_cap, self.tenant_cap):
            if cap is not None and cap < 1:
                raise ValueError("concurrency limits must be at least 1 (or None)")

    def full(self, tenant: str | None) -> tuple[str, int] | None:
        """Which cap taking one more slot would exceed (``"server"``/``"tenant"``), if any."""
        if self.total_cap is not None and self.held >= self.total_cap:
            return "server", self.total_cap
        cap = self.tenant_cap
        if cap is not None and tenant is not None and self.by_tenant.get(tenant, 0) >= cap:
            return "tenant", cap
        return None

    def take(self, tenant: str | None) -> None:
        self.held += 1
        if tenant is not None:
            self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1

    def give(self, tenant: str | None) -> None:
        self.held -= 1
        if tenant is not None:
            left = self.by_tenant[tenant] - 1
            if left:
                self.by_tenant[tenant] = left
            else:
                del self.by_tenant[tenant]
