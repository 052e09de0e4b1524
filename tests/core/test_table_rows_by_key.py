"""The cancellation table's read-only view by key follows every insert, removal and eviction."""

from __future__ import annotations

from trio_mcp_cancel._core.table import CancellationTable


def test_the_view_by_key_sees_inserts_removals_and_evictions() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=2)
    view = table.rows_by_key
    row, inserted, _ = table.insert("ns", 1, "stop", 0.0)
    assert inserted and view.get(("ns", 1)) is row and ("ns", 1) in view
    table.insert("ns", 2, None, 1.0)
    table.insert("ns", 3, None, 2.0)  # over max_rows: the oldest goes
    assert ("ns", 1) not in view and table.get(("ns", 1)) is None
    table.remove(("ns", 2))
    assert ("ns", 2) not in view
    assert [key for key in view] == [("ns", 3)] and len(view) == len(table) == 1
