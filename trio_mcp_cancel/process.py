"""Child processes bound to a request's cancellation: polite stop, then SIGKILL.

``await run_process(["make", "-j4"], progress=ctx)`` inside a tool: when
the client cancels, the child gets ``SIGTERM`` (or its stdin closed); when
the grace period runs out, its whole process group gets ``SIGKILL``.  See
:mod:`trio_mcp_cancel._work.process` for the guarantees.
"""

from __future__ import annotations

from ._public import fixup_module_metadata
from ._work.process import CLOSE_STDIN, ProcessResult, ProgressReporter, run_process

__all__ = ["CLOSE_STDIN", "ProcessResult", "ProgressReporter", "run_process"]


fixup_module_metadata(__name__, __all__, globals())
