"""The README's demo command works: the example server and client, end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_client_demo_cancels_every_way_and_leaves_nothing() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "client_demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    # 1. and 3.: cancelled by notification, answered -32800 with the reason.
    assert '"data": {"reason": "user pressed stop"}' in out
    assert '"data": {"reason": "changed my mind"}' in out
    # 2. and 4.: cancelled by disconnect, on HTTP and on WebSocket.
    assert "reason='client disconnected', kind='disconnect'" in out
    assert "reason='connection closed', kind='disconnect'" in out
    assert out.count("nothing is left in flight") == 2
    # 5.: the stubborn tool was hard-cancelled and still answered.
    assert "request.hard_cancelled: request_id=4" in out
    assert '"data": {"reason": "too slow"}' in out
    assert out.rstrip().endswith("done: 0 requests in flight, 0 rows left")
