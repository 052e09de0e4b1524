"""Run the official MCP conformance suite against ``examples/conformance_server.py``.

``python3 dev.py conformance`` runs this with the project's venv: it installs
the pinned Node tooling (:mod:`node_tools`), starts the example server on a
free 127.0.0.1 port, and runs ``conformance server --requirements <era>``
for both eras (2025-11-25: legacy, initialize and sessions; 2026-07-28:
modern, stateless) with the expected-failures baseline of that era
(``conformance/baseline-<era>.yml``).  It exits non-zero when a scenario
fails that the baseline does not list, or one the baseline lists passes
(a stale baseline), which is the suite's own rule.

Options: ``--era 2025-11-25`` (or ``2026-07-28``) runs one era only;
``--scenario NAME`` one scenario (no baseline, no requirements set).
The requirement sets also run their not-scored scenarios (the Tasks
extension, pending ones); the suite reports them but never fails on them.
The Tasks ones are held to a baseline of our own,
``conformance/baseline-tasks.yml`` (entries ``scenario`` or
``scenario:check-id``, each with its reason): after the 2026-07-28 run,
a failing Tasks check it does not list, or an entry that passes (stale),
fails the run, exactly like the suite's rule for scored scenarios.

Then our own cancellation scenarios (``conformance/scenarios/``, written in
the suite's scenario format; the suite has none, conformance#433) run at
the same era with their runner, strictly: a failing or warning check fails
the run.  ``--scenario cancellation-...`` runs one of them alone.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import node_tools

ROOT = node_tools.ROOT
ERAS = ("2025-11-25", "2026-07-28")
RESULTS = node_tools.TOOLS / "results"
TASKS_BASELINE = ROOT / "conformance" / "baseline-tasks.yml"
_URL = re.compile(r"(http://127\.0\.0\.1:\d+/mcp)")
_RESULT = re.compile(r"^(?:\x1b\[[0-9;]*m)?([✓✗])\s+(\S+):\s+\d+ passed", re.M)


def scored(era: str) -> list[str]:
    """The scored server scenarios of *era*: the ``server:`` list of its requirements file."""
    names: list[str] = []
    inside = False
    for line in _requirements(era):
        if not line.startswith((" ", "#")) and line.strip():
            inside = line.strip() == "server:"
        elif inside and line.startswith("  - "):
            names.append(line[4:].split("#")[0].strip())
    return names


def summary(era: str, output: str) -> str:
    """``<era>: N of M scored scenarios pass`` (and which fail), from the suite's output."""
    outcome = {name: mark == "✓" for mark, name in _RESULT.findall(output)}
    names = scored(era)
    failing = [name for name in names if not outcome.get(name, False)]
    line = f"{era}: {len(names) - len(failing)} of {len(names)} scored scenarios pass"
    return line + (f" (failing: {', '.join(failing)})" if failing else "")


def _requirements(era: str) -> list[str]:
    path = node_tools.TOOLS / "node_modules/@modelcontextprotocol/conformance/requirements"
    return (path / f"{era}.yaml").read_text().splitlines()


def task_scenarios(era: str) -> list[str]:
    """The not-scored server scenarios of the Tasks extension in *era*'s requirements."""
    names = re.findall(r"^\s*- scenario: (tasks-\S+)$", "\n".join(_requirements(era)), re.M)
    return names


def read_baseline(path: Path) -> list[str]:
    """The ``server:`` entries of a baseline file (``scenario`` or ``scenario:check-id``)."""
    entries: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("  - "):
            entries.append(line[4:].split("#")[0].strip())
    return entries


def load_checks(out: Path, scenario: str) -> list[dict[str, object]] | None:
    """The checks one scenario reported in *out* (``None``: it did not run)."""
    found = sorted(out.glob(f"server-{scenario}-20*/checks.json"))
    if not found:
        return None
    checks = json.loads(found[-1].read_text())
    return checks if isinstance(checks, list) else None


def judge_tasks(
    era: str, scenarios: list[str], out: Path, baseline: list[str]
) -> tuple[str, list[str]]:
    """The Tasks *scenarios*' summary line, and what is unexpected (failures, stale entries)."""
    wholesale = {entry for entry in baseline if ":" not in entry}
    per_check = {tuple(entry.split(":", 1)) for entry in baseline if ":" in entry}
    problems = [
        f"baseline entry for an unknown scenario: {entry}"
        for entry in baseline
        if entry.split(":", 1)[0] not in scenarios
    ]
    failing_scenarios: list[str] = []
    skipped: list[str] = []
    passed = total = 0
    for scenario in scenarios:
        checks = load_checks(out, scenario)
        if checks is None:
            problems.append(f"{scenario}: did not run")
            failing_scenarios.append(scenario)
            continue
        status = {str(c.get("id")): str(c.get("status")) for c in checks}
        failures = [check for check, state in status.items() if state == "FAILURE"]
        total += sum(1 for state in status.values() if state != "SKIPPED")
        passed += sum(1 for state in status.values() if state == "SUCCESS")
        if failures:
            failing_scenarios.append(scenario)
        elif all(state == "SKIPPED" for state in status.values()):
            skipped.append(scenario)
        if scenario in wholesale:
            if not failures:
                problems.append(f"{scenario}: passes, but the baseline lists it (stale)")
            continue
        for check in failures:
            if (scenario, check) not in per_check:
                problems.append(f"{scenario}:{check}: unexpected failure")
        for listed_scenario, check in per_check:
            if listed_scenario == scenario and status.get(check) == "SUCCESS":
                problems.append(f"{scenario}:{check}: passes, but the baseline lists it (stale)")
    passing = len(scenarios) - len(failing_scenarios) - len(skipped)
    line = (
        f"{era} Tasks extension (not scored): {passing} of {len(scenarios)} scenarios pass"
        f" ({passed} of {total} checks)"
    )
    if skipped:
        line += f"; skipped by the suite itself: {', '.join(skipped)}"
    if failing_scenarios:
        line += f"; failing: {', '.join(failing_scenarios)}"
    return line, problems


class Server:
    """The example server in a child process, on a port it picks itself."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "conformance_server.py"), "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = self._wait_url()
        # Keep draining its output (to a log), so it never blocks on a full pipe.
        self.log = open(RESULTS / "server.log", "w")
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_url(self) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            match = _URL.search(line)
            if match:
                return match.group(1)
        self.stop()
        raise SystemExit("the conformance server did not start:\n" + "".join(seen[-40:]))

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


SCENARIOS = ROOT / "conformance" / "scenarios"


def run_scenarios(url: str, era: str, out: Path, extra: list[str]) -> tuple[int, str]:
    """Our cancellation scenarios at *era* (``conformance/scenarios/run.ts``), strict."""
    command = [
        str(node_tools.node()),
        str(SCENARIOS / "run.ts"),
        *("--url", url, "--spec-version", era, "-o", str(out), "--strict", *extra),
    ]
    print("+", " ".join(command), flush=True)
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=node_tools.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=300,
    )
    print(done.stdout, flush=True)
    return done.returncode, done.stdout


def run_suite(url: str, args: list[str], label: str) -> tuple[int, str]:
    command = [str(node_tools.bin_path("conformance")), "server", "--url", url, *args]
    print("+", " ".join(command), flush=True)
    done = subprocess.run(
        command,
        cwd=node_tools.TOOLS,
        env=node_tools.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        timeout=900,
    )
    (RESULTS / f"{label}.txt").write_text(done.stdout)
    print(done.stdout, flush=True)
    return done.returncode, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=ERAS, action="append")
    parser.add_argument("--scenario")
    options = parser.parse_args()
    node_tools.ensure()
    RESULTS.mkdir(parents=True, exist_ok=True)
    server = Server()
    failed: list[str] = []
    summaries: list[str] = []
    try:
        print(f"conformance server at {server.url}", flush=True)
        for era in options.era or ERAS:
            out = RESULTS / era
            shutil.rmtree(out, ignore_errors=True)  # judge this run's checks only
            if options.scenario and options.scenario.startswith("cancellation-"):
                code, _ = run_scenarios(server.url, era, out, ["--scenario", options.scenario])
                if code != 0:
                    failed.append(f"{era} (cancellation scenarios)")
                continue
            if options.scenario:
                args = ["--scenario", options.scenario, "--spec-version", era, "--force"]
            else:
                baseline = ROOT / "conformance" / f"baseline-{era}.yml"
                args = ["--requirements", era, "--expected-failures", str(baseline)]
            code, output = run_suite(server.url, [*args, "-o", str(out)], era)
            if code != 0:
                failed.append(era)
            if options.scenario:
                continue
            summaries.append(summary(era, output))
            tasks = task_scenarios(era)
            if tasks:
                line, problems = judge_tasks(era, tasks, out, read_baseline(TASKS_BASELINE))
                summaries.append(line)
                for problem in problems:
                    print(f"conformance Tasks: {problem}", file=sys.stderr, flush=True)
                if problems:
                    failed.append(f"{era} (Tasks extension)")
            code, output = run_scenarios(server.url, era, out / "cancellation", [])
            summaries.append(output.strip().splitlines()[-1] if output.strip() else f"{era}: none")
            if code != 0:
                failed.append(f"{era} (cancellation scenarios)")
    finally:
        server.stop()
    for line in summaries:
        print(f"conformance {line}", flush=True)
    if failed:
        print(f"conformance: unexpected results for {', '.join(failed)}", file=sys.stderr)
        return 1
    print("conformance: every era as expected", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
