"""The Tasks baseline of conformance/run_suite.py: unexpected failures and stale entries fail.

The suite itself never fails on not-scored scenarios, so this rule is ours;
these tests feed it ``checks.json`` files shaped like the suite's output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from _support.repo_paths import ROOT

sys.path.insert(0, str(ROOT / "conformance"))
import run_suite

SCENARIOS = ["tasks-lifecycle", "tasks-mrtr-input", "tasks-status-notifications"]


def write(out: Path, scenario: str, checks: dict[str, str]) -> None:
    folder = out / f"server-{scenario}-2026-12-03T07-08-19-373Z"
    folder.mkdir(parents=True)
    rows = [{"id": check, "status": status} for check, status in checks.items()]
    (folder / "checks.json").write_text(json.dumps(rows))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    write(tmp_path, "tasks-lifecycle", {"create": "SUCCESS", "cancel": "SUCCESS"})
    write(tmp_path, "tasks-mrtr-input", {"park": "FAILURE", "resume": "FAILURE", "x": "SUCCESS"})
    write(tmp_path, "tasks-status-notifications", {"all": "SKIPPED"})
    return tmp_path


def test_expected_failures_pass_and_are_counted(out: Path) -> None:
    line, problems = run_suite.judge_tasks("2026-07-28", SCENARIOS, out, ["tasks-mrtr-input"])
    assert problems == []
    assert "1 of 3 scenarios pass (3 of 5 checks)" in line
    assert "skipped by the suite itself: tasks-status-notifications" in line
    assert line.endswith("failing: tasks-mrtr-input")


def test_per_check_entries_excuse_only_their_check(out: Path) -> None:
    _, problems = run_suite.judge_tasks(
        "2026-07-28", SCENARIOS, out, ["tasks-mrtr-input:park", "tasks-lifecycle:absent"]
    )
    # An absent check is tolerated (a scenario may bail before it), an unlisted failure is not.
    assert problems == ["tasks-mrtr-input:resume: unexpected failure"]


def test_stale_entries_and_missing_scenarios_fail(out: Path, tmp_path: Path) -> None:
    baseline = ["tasks-mrtr-input", "tasks-lifecycle", "tasks-mrtr-input:x", "tasks-gone"]
    _, problems = run_suite.judge_tasks("2026-07-28", [*SCENARIOS, "tasks-new"], out, baseline)
    assert problems == [
        "baseline entry for an unknown scenario: tasks-gone",
        "tasks-lifecycle: passes, but the baseline lists it (stale)",
        "tasks-new: did not run",
    ]
    _, problems = run_suite.judge_tasks("2026-07-28", SCENARIOS, out, ["tasks-lifecycle:create"])
    assert "tasks-lifecycle:create: passes, but the baseline lists it (stale)" in problems
    assert "tasks-mrtr-input:park: unexpected failure" in problems


def test_the_repository_baseline_parses() -> None:
    entries = run_suite.read_baseline(run_suite.TASKS_BASELINE)
    assert all(entry.startswith("tasks-") for entry in entries)
    assert "server:" in run_suite.TASKS_BASELINE.read_text()
