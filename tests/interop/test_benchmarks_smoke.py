"""The benchmarks still run (quick sizes); their hard bounds are asserted inside.

No timing is judged here: ratios are reported by ``python3 dev.py bench``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from _support.repo_paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def test_quick_benchmarks_run_and_leave_results_alone() -> None:
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for bench in (
        "1 poll",
        "2 tracked",
        "3 flood",
        "3 growth",
        "4 e2e",
        "5 cancel latency",
        "6 memory",
        "8 telemetry",
        "10 client",
        "11 workers",
    ):
        assert f"| {bench} |" in done.stdout
    assert "skipped" not in done.stdout
    if shutil.which("wrk"):  # the quick profile of the hot path ran and was summarised
        assert "Trio tasks spawned" in done.stdout and "| tottime share |" in done.stdout
    assert results.read_bytes() == before
