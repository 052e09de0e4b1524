"""The bounded row table: quota, global cap and the eviction order."""

from __future__ import annotations

import random

import pytest

from trio_mcp_cancel import CancellationLimitReached
from trio_mcp_cancel._core.table import CancellationTable


def fill(table: CancellationTable, namespace: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        table.insert(namespace, i, None, now=float(len(table)))


def test_quota_rejects_and_only_that_scope() -> None:
    table = CancellationTable(max_rows_per_namespace=3, max_rows=None)
    fill(table, "a", 3)
    with pytest.raises(CancellationLimitReached) as info:
        table.insert("a", 99, None, 0.0)
    assert info.value.namespace == "a" and info.value.limit == 3
    table.insert("b", 99, None, 0.0)
    assert table.namespace_size("a") == 3 and table.namespace_size("b") == 1


def test_repeat_insert_keeps_first_row() -> None:
    table = CancellationTable()
    row, inserted, _ = table.insert("a", 1, "first", 1.0)
    again, inserted_again, _ = table.insert("a", 1, "second", 2.0)
    assert inserted and not inserted_again
    assert again is row and row.reason == "first" and row.at == 1.0
    assert len(table) == 1


def test_global_cap_evicts_a_batch_from_the_largest_scope_oldest_first() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=100)
    assert table.batch_size == 5
    fill(table, "small", 10)
    fill(table, "big", 60, start=100)
    fill(table, "medium", 30, start=200)
    assert len(table) == 100
    _, _, evicted = table.insert("new", 1, None, 1000.0)
    assert [(r.namespace, r.request_id) for r in evicted] == [("big", i) for i in range(100, 105)]
    assert len(table) == 96
    assert table.namespace_size("big") == 55 and table.namespace_size("small") == 10


def test_eviction_moves_on_to_the_next_largest_scope() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=40)  # batch of 2
    fill(table, "a", 1)
    fill(table, "b", 1, start=10)
    fill(table, "c", 38, start=20)
    _, _, first = table.insert("z", 0, None, 100.0)
    assert [r.namespace for r in first] == ["c", "c"]
    # Shrink c below b: c's rows go, then a and b tie at one row each.
    table2 = CancellationTable(max_rows_per_namespace=None, max_rows=20)  # batch of 1
    fill(table2, "x", 1)
    fill(table2, "y", 2, start=10)
    for i in range(17):
        table2.insert(f"solo{i}", 0, None, 50.0 + i)
    _, _, evicted = table2.insert("late", 0, None, 99.0)
    assert [r.namespace for r in evicted] == ["y"]  # largest first, even though x is older


def test_ties_fall_back_to_age_whoever_owns_the_rows() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=40)  # batch of 2
    namespaces = [f"s{i}" for i in range(40)]
    random.Random(7).shuffle(namespaces)
    for t, namespace in enumerate(namespaces):
        table.insert(namespace, 1, None, float(t))
    _, _, evicted = table.insert("newcomer", 1, None, 100.0)
    assert [r.namespace for r in evicted] == namespaces[:2]


def test_batch_is_always_full_even_across_many_scopes() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=200)  # batch of 10
    for i in range(200):
        table.insert(f"s{i % 50}", i, None, float(i))
    _, _, evicted = table.insert("new", 0, None, 500.0)
    assert len(evicted) == 10
    assert len(table) == 191
    assert table.evicted_total == 10


def test_removed_rows_change_the_eviction_order() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=20)  # batch of 1
    fill(table, "a", 10)
    fill(table, "b", 10, start=100)
    for i in range(5):
        table.remove(("a", i))
    table.insert("c", 0, None, 0.0)
    fill(table, "d", 4, start=300)
    _, _, evicted = table.insert("e", 0, None, 0.0)
    assert [(r.namespace, r.request_id) for r in evicted] == [("b", 100)]


def test_remove_is_idempotent_and_forgets_empty_scopes() -> None:
    table = CancellationTable()
    table.insert("a", 1, None, 0.0)
    assert table.remove(("a", 1)) is not None
    assert table.remove(("a", 1)) is None
    assert table.namespace_count() == 0 and len(table) == 0


def test_scope_that_empties_and_returns_is_not_confused_by_stale_entries() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=20)  # batch of 1
    for round_ in range(5):
        table.insert("flappy", round_, None, 0.0)
        table.remove(("flappy", round_))
    fill(table, "a", 12)
    fill(table, "flappy", 8, start=50)
    _, _, evicted = table.insert("z", 0, None, 0.0)
    assert [r.namespace for r in evicted] == ["a"]
    assert table.namespace_size("flappy") == 8


def test_expire_removes_only_old_rows() -> None:
    table = CancellationTable()
    for t in range(10):
        table.insert(f"s{t % 3}", t, None, float(t))
    expired = table.expire(cutoff=4.0)
    assert sorted(r.request_id for r in expired) == [0, 1, 2, 3]
    assert sorted(r.request_id for r in table.rows()) == [4, 5, 6, 7, 8, 9]
    assert table.expire(cutoff=4.0) == []


def test_heap_stays_linear_in_scopes_under_churn() -> None:
    table = CancellationTable(max_rows_per_namespace=None, max_rows=1000)
    rng = random.Random(1)
    for i in range(20_000):
        namespace = f"s{rng.randrange(30)}"
        if rng.random() < 0.5:
            table.insert(namespace, i, None, float(i))
        else:
            rows = table.rows()
            if rows:
                victim = rows[rng.randrange(len(rows))]
                table.remove((victim.namespace, victim.request_id))
    assert len(table._heap) <= 2 * table.namespace_count() + 65
    assert len(table) <= 1000


def test_eviction_matches_a_brute_force_model() -> None:
    """Random inserts and removals against a slow but obvious reference."""
    rng = random.Random(42)
    table = CancellationTable(max_rows_per_namespace=None, max_rows=60)  # batch of 3
    model: dict[tuple[str, int], int] = {}  # key -> seq
    seq = 0
    for step in range(3000):
        namespace = f"s{rng.randrange(8)}"
        key = (namespace, rng.randrange(40))
        if rng.random() < 0.3 and model:
            victim = rng.choice(sorted(model))
            table.remove(victim)
            del model[victim]
            continue
        if key in model:
            continue
        expected: list[tuple[str, int]] = []
        if len(model) >= 60:
            sizes: dict[str, list[tuple[int, tuple[str, int]]]] = {}
            for k, s in model.items():
                sizes.setdefault(k[0], []).append((s, k))
            order = sorted(sizes.values(), key=lambda rows: (-len(rows), min(rows)[0]))
            for rows in order:
                for _, k in sorted(rows):
                    if len(expected) < 3:
                        expected.append(k)
        _, _, evicted = table.insert(key[0], key[1], None, float(step))
        assert [(r.namespace, r.request_id) for r in evicted] == expected
        for k in expected:
            del model[k]
        model[key] = seq
        seq += 1
        assert len(table) == len(model)
