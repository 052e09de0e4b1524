"""``python -m trio_mcp_cancel run MODULE:ATTR ...``: the ``trio-mcp-cancel`` command."""

import sys

from ._run.cli import main

if __name__ == "__main__":
    sys.exit(main())
