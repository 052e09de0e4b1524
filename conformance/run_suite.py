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
extension, pending ones) and report them; they never fail the run.
"""

from __future__ import annotations

import argparse
import re
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
_URL = re.compile(r"(http://127\.0\.0\.1:\d+/mcp)")
_RESULT = re.compile(r"^(?:\x1b\[[0-9;]*m)?([✓✗])\s+(\S+):\s+\d+ passed", re.M)


def scored(era: str) -> list[str]:
    """The scored server scenarios of *era*: the ``server:`` list of its requirements file."""
    path = node_tools.TOOLS / "node_modules/@modelcontextprotocol/conformance/requirements"
    names: list[str] = []
    inside = False
    for line in (path / f"{era}.yaml").read_text().splitlines():
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
            out = str(RESULTS / era)
            if options.scenario:
                args = ["--scenario", options.scenario, "--spec-version", era, "-o", out]
            else:
                baseline = ROOT / "conformance" / f"baseline-{era}.yml"
                args = ["--requirements", era, "--expected-failures", str(baseline), "-o", out]
            code, output = run_suite(server.url, args, era)
            if not options.scenario:
                summaries.append(summary(era, output))
            if code != 0:
                failed.append(era)
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
