"""The bounded table of client cancellation rows: quota, global cap, eviction.

Rows are keyed ``(scope, request_id)``.  Two bounds apply, in this order:

* the **per-scope quota** rejects an insert (:class:`CancellationLimitReached`)
  once a scope holds ``max_rows_per_scope`` rows.  It is the only bound that
  rejects, because a global bound that rejected would let one client deny
  every other client's cancellations;
* the **global cap** never rejects.  An insert that would exceed
  ``max_rows`` first evicts a batch of ``max(1, max_rows // 20)`` rows:
  oldest first from the largest scope, then from the next largest.  Scopes of
  equal size are taken oldest-row first, so when every scope holds one row
  eviction is simply by age, whoever owns the rows.

Finding "the largest scope" must not cost a sort per insert.  Scopes sit in
a heap ordered by ``(-size, oldest row)``; a scope whose size changes pushes
a fresh entry and bumps its version, and stale entries are skipped when
popped (lazy deletion).  Each insert or removal is ``O(log n)``, and a batch
eviction is ``O(batch log n)``.  The heap is rebuilt when stale entries
outnumber live ones, which keeps its size linear in the number of scopes.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Iterator

import attrs

from .errors import CancellationLimitReached
from .validation import RequestId

__all__ = ["CancellationTable", "Key", "Row"]

Key = tuple[str, RequestId]


@attrs.define(eq=False, slots=True)
class Row:
    """One recorded client cancellation."""

    scope: str
    request_id: RequestId
    reason: str | None
    at: float
    """Trio clock time of the insert; what the TTL is measured against."""
    seq: int
    """Insertion order; breaks ties that a mock clock's equal times leave."""


@attrs.define(eq=False)
class CancellationTable:
    """Rows of client cancellations, bounded by quota and cap."""

    max_rows_per_scope: int | None = 256
    max_rows: int | None = 10_000
    # Global insertion order, oldest first: TTL expiry pops from the front.
    _rows: OrderedDict[Key, Row] = attrs.field(init=False, factory=OrderedDict)
    # Per scope, also oldest first: eviction pops from the front.
    _by_scope: dict[str, OrderedDict[RequestId, Row]] = attrs.field(init=False, factory=dict)
    _heap: list[tuple[int, int, int, str]] = attrs.field(init=False, factory=list)
    _versions: dict[str, int] = attrs.field(init=False, factory=dict)
    _seq: Iterator[int] = attrs.field(init=False, factory=itertools.count)
    evicted_total: int = attrs.field(init=False, default=0)

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

    def scope_size(self, scope: str) -> int:
        rows = self._by_scope.get(scope)
        return 0 if rows is None else len(rows)

    def scope_count(self) -> int:
        return len(self._by_scope)

    def rows(self) -> list[Row]:
        """A snapshot of every row, oldest first (for tests and debugging)."""
        return list(self._rows.values())

    def admit(self, scope: str, request_id: RequestId) -> Row | None:
        """Return the key's existing row, or ``None`` if a new row would be accepted.

        Raises :class:`CancellationLimitReached` when the scope is at its
        quota.  Lets a caller refuse before it does any work on the row.
        """
        existing = self._rows.get((scope, request_id))
        if existing is not None:
            return existing
        if (
            self.max_rows_per_scope is not None
            and self.scope_size(scope) >= self.max_rows_per_scope
        ):
            raise CancellationLimitReached(scope, self.max_rows_per_scope)
        return None

    def insert(
        self, scope: str, request_id: RequestId, reason: str | None, now: float
    ) -> tuple[Row, bool, list[Row]]:
        """Record a row; return ``(row, inserted, evicted_rows)``.

        A key that already has a row keeps it (first cancellation wins, and a
        repeated cancel cannot refresh its TTL or move it to the back of the
        eviction order).  Raises :class:`CancellationLimitReached` when the
        scope is at its quota.
        """
        existing = self.admit(scope, request_id)
        if existing is not None:
            return existing, False, []
        scope_rows = self._by_scope.get(scope)
        evicted: list[Row] = []
        if self.max_rows is not None and len(self._rows) >= self.max_rows:
            evicted = self._evict(self.batch_size)
            scope_rows = self._by_scope.get(scope)
        row = Row(scope, request_id, reason, now, next(self._seq))
        if scope_rows is None:
            scope_rows = self._by_scope[scope] = OrderedDict()
        scope_rows[request_id] = row
        self._rows[(scope, request_id)] = row
        self._touch(scope, scope_rows)
        return row, True, evicted

    def remove(self, key: Key) -> Row | None:
        """Remove and return the row for *key*; ``None`` (and no write) if absent."""
        row = self._rows.pop(key, None)
        if row is not None:
            scope_rows = self._by_scope[row.scope]
            del scope_rows[row.request_id]
            self._touch(row.scope, scope_rows)
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
            del self._by_scope[row.scope][row.request_id]
            touched.add(row.scope)
            expired.append(row)
        for scope in touched:
            self._touch(scope, self._by_scope[scope])
        return expired

    def _touch(self, scope: str, scope_rows: OrderedDict[RequestId, Row]) -> None:
        """Re-file *scope* in the heap after its size or oldest row changed."""
        if not scope_rows:
            del self._by_scope[scope]
            self._versions.pop(scope, None)
            return
        # Versions come from one counter so a scope that empties and comes
        # back can never match a stale entry of its earlier life.
        version = self._versions[scope] = next(self._seq)
        oldest = next(iter(scope_rows.values())).seq
        heapq.heappush(self._heap, (-len(scope_rows), oldest, version, scope))
        if len(self._heap) > 2 * len(self._by_scope) + 64:
            self._compact()

    def _compact(self) -> None:
        self._heap = [entry for entry in self._heap if self._versions.get(entry[3]) == entry[2]]
        heapq.heapify(self._heap)

    def _evict(self, count: int) -> list[Row]:
        evicted: list[Row] = []
        while len(evicted) < count and self._heap:
            _, _, version, scope = heapq.heappop(self._heap)
            if self._versions.get(scope) != version:
                continue  # stale entry
            scope_rows = self._by_scope[scope]
            while scope_rows and len(evicted) < count:
                request_id, row = scope_rows.popitem(last=False)
                del self._rows[(scope, request_id)]
                evicted.append(row)
            self._touch(scope, scope_rows)
        self.evicted_total += len(evicted)
        return evicted
