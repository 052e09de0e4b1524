"""The bounded table of client cancellation rows: quota, global cap, eviction.

Rows are keyed ``(namespace, request_id)``.  Two bounds apply, in this order:

* the **per-namespace quota** rejects an insert (:class:`CancellationLimitReached`)
  once a namespace holds ``max_rows_per_namespace`` rows.  It is the only bound that
  rejects, because a global bound that rejected would let one client deny
  every other client's cancellations;
* the **global cap** never rejects.  An insert that would exceed
  ``max_rows`` first evicts a batch of ``max(1, max_rows // 20)`` rows:
  oldest first from the largest namespace, then from the next largest.  Scopes of
  equal size are taken oldest-row first, so when every namespace holds one row
  eviction is simply by age, whoever owns the rows.

Finding "the largest namespace" must not cost a sort per insert.  Scopes sit in
a heap ordered by ``(-size, oldest row)``; a namespace whose size changes pushes
a fresh entry and bumps its version, and stale entries are skipped when
popped (lazy deletion).  Each insert or removal is ``O(log n)``, and a batch
eviction is ``O(batch log n)``.  The heap is rebuilt when stale entries
outnumber live ones, which keeps its size linear in the number of namespaces.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping

import attrs

from .errors import CancellationLimitReached
from .validation import RequestId

__all__ = ["CancellationTable", "DueCancels", "Key", "Row"]

Key = tuple[str, RequestId]


@attrs.define(eq=False, slots=True)
class Row:
    """One recorded client cancellation."""

    namespace: str
    request_id: RequestId
    reason: str | None
    at: float
    """Trio clock time of the insert; what the TTL is measured against."""
    seq: int
    """Insertion order; breaks ties that a mock clock's equal times leave."""


@attrs.define(eq=False)
class CancellationTable:
    """Rows of client cancellations, bounded by quota and cap."""

    max_rows_per_namespace: int | None = 256
    max_rows: int | None = 10_000
    # Global insertion order, oldest first: TTL expiry pops from the front.
    _rows: OrderedDict[Key, Row] = attrs.field(init=False, factory=OrderedDict)
    # Per namespace, also oldest first: eviction pops from the front.
    _by_namespace: dict[str, OrderedDict[RequestId, Row]] = attrs.field(init=False, factory=dict)
    _heap: list[tuple[int, int, int, str]] = attrs.field(init=False, factory=list)
    _versions: dict[str, int] = attrs.field(init=False, factory=dict)
    _seq: Iterator[int] = attrs.field(init=False, factory=itertools.count)
    evicted_total: int = attrs.field(init=False, default=0)
    rows_by_key: Mapping[Key, Row] = attrs.field(init=False)
    """The rows by key, read-only: what :meth:`get` and ``in`` read, for the
    registry's two lookups on every tracked request without a method frame each."""

    @rows_by_key.default
    def _rows_by_key(self) -> Mapping[Key, Row]:
        return self._rows

    @property
    def batch_size(self) -> int:
        """How many rows one eviction removes."""
        return 0 if self.max_rows is None else max(1, self.max_rows // 20)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def get(self, key: Key) -> Row | None:
        return self._rows.get(key)

    def namespace_size(self, namespace: str) -> int:
        rows = self._by_namespace.get(namespace)
        return 0 if rows is None else len(rows)

    def namespace_count(self) -> int:
        return len(self._by_namespace)

    def rows(self) -> list[Row]:
        """A snapshot of every row, oldest first (for tests and debugging)."""
        return list(self._rows.values())

    def admit(self, namespace: str, request_id: RequestId) -> Row | None:
        """Return the key's existing row, or ``None`` if a new row would be accepted.

        Raises :class:`CancellationLimitReached` when the namespace is at its
        quota.  Lets a caller refuse before it does any work on the row.
        """
        existing = self._rows.get((namespace, request_id))
        if existing is not None:
            return existing
        if (
            self.max_rows_per_namespace is not None
            and self.namespace_size(namespace) >= self.max_rows_per_namespace
        ):
            raise CancellationLimitReached(namespace, self.max_rows_per_namespace)
        return None

    def insert(
        self, namespace: str, request_id: RequestId, reason: str | None, now: float
    ) -> tuple[Row, bool, list[Row]]:
        """Record a row; return ``(row, inserted, evicted_rows)``.

        A key that already has a row keeps it (first cancellation wins, and a
        repeated cancel cannot refresh its TTL or move it to the back of the
        eviction order).  Raises :class:`CancellationLimitReached` when the
        namespace is at its quota.
        """
        existing = self.admit(namespace, request_id)
        if existing is not None:
            return existing, False, []
        namespace_rows = self._by_namespace.get(namespace)
        evicted: list[Row] = []
        if self.max_rows is not None and len(self._rows) >= self.max_rows:
            evicted = self._evict(self.batch_size)
            namespace_rows = self._by_namespace.get(namespace)
        row = Row(namespace, request_id, reason, now, next(self._seq))
        if namespace_rows is None:
            namespace_rows = self._by_namespace[namespace] = OrderedDict()
        namespace_rows[request_id] = row
        self._rows[(namespace, request_id)] = row
        self._touch(namespace, namespace_rows)
        return row, True, evicted

    def remove(self, key: Key) -> Row | None:
        """Remove and return the row for *key*; ``None`` (and no write) if absent."""
        row = self._rows.pop(key, None)
        if row is not None:
            namespace_rows = self._by_namespace[row.namespace]
            del namespace_rows[row.request_id]
            self._touch(row.namespace, namespace_rows)
        return row

    def expire(self, cutoff: float) -> list[Row]:
        """Remove every row recorded before *cutoff*; cost is the number removed."""
        expired: list[Row] = []
        touched: set[str] = set()
        while self._rows:
            row = next(iter(self._rows.values()))
            if row.at >= cutoff:
                break
            self._rows.popitem(last=False)
            del self._by_namespace[row.namespace][row.request_id]
            touched.add(row.namespace)
            expired.append(row)
        for namespace in touched:
            self._touch(namespace, self._by_namespace[namespace])
        return expired

    def _touch(self, namespace: str, namespace_rows: OrderedDict[RequestId, Row]) -> None:
        """Re-file *namespace* in the heap after its size or oldest row changed."""
        if not namespace_rows:
            del self._by_namespace[namespace]
            self._versions.pop(namespace, None)
            return
        # Versions come from one counter so a namespace that empties and comes
        # back can never match a stale entry of its earlier life.
        version = self._versions[namespace] = next(self._seq)
        oldest = next(iter(namespace_rows.values())).seq
        heapq.heappush(self._heap, (-len(namespace_rows), oldest, version, namespace))
        if len(self._heap) > 2 * len(self._by_namespace) + 64:
            self._compact()

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if self._versions.get(entry[3]) == entry[2]]
        heapq.heapify(self._heap)

    def _evict(self, count: int) -> list[Row]:
        evicted: list[Row] = []
        while len(evicted) < count and self._heap:
            _, _, version, namespace = heapq.heappop(self._heap)
            if self._versions.get(namespace) != version:
                continue  # stale entry
            namespace_rows = self._by_namespace[namespace]
            while namespace_rows and len(evicted) < count:
                request_id, row = namespace_rows.popitem(last=False)
                del self._rows[(namespace, request_id)]
                evicted.append(row)
            self._touch(namespace, namespace_rows)
        self.evicted_total += len(evicted)
        return evicted


# -- server cancels due later --------------------------------------------------
# A tool's time limit: a map from a request's private token to when it is due
# and why, with a heap of ``(due, token)`` to find the next one.  Removing a
# request leaves its heap entry behind (skipped when it comes up); the heap is
# rebuilt once it holds more than twice the live entries, so its size stays
# bounded by the requests in flight, not by how many ever had a limit.


class DueCancels:
    """Tokens of tracked requests and when (and why) each is to be cancelled."""

    __slots__ = ("_heap", "due")

    def __init__(self) -> None:
        self.due: dict[int, tuple[float, str]] = {}
        """Token -> (when, reason): a plain dict, so the per-request check on the way out
        (``if due.due``) costs no Python call."""
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self.due)

    @property
    def next_at(self) -> float:
        """When the next one may be due (``inf``: none)."""
        return self._heap[0][0] if self._heap else math.inf

    def add(self, token: int, at: float, reason: str) -> bool:
        """Keep *token* due at *at*; ``False`` when it was due earlier already (kept)."""
        held = self.due.get(token)
        if held is not None and held[0] <= at:
            return False
        self.due[token] = (at, reason)
        heapq.heappush(self._heap, (at, token))
        return True

    def discard(self, token: int) -> None:
        """Forget *token* (its request left)."""
        if self.due.pop(token, None) is not None and len(self._heap) > 2 * len(self.due) + 64:
            self._heap = [entry for entry in self._heap if entry[1] in self.due]
            heapq.heapify(self._heap)

    def pop_due(self, now: float) -> list[tuple[int, str]]:
        """The tokens due by *now*, and their reasons, forgotten here."""
        due: list[tuple[int, str]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, token = heapq.heappop(heap)
            entry = self.due.pop(token, None)
            if entry is not None:
                due.append((token, entry[1]))
        return due
