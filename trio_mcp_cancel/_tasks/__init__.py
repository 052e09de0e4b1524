"""The Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663), on the Extension API.

:mod:`.extension` is what a server takes (``McpServer(extensions=[Tasks()])``);
:mod:`.manager` runs the tasks and holds their rules, with one module per
piece beside it (admission and quotas, running the work, the ``tasks/*``
requests, status changes, the bus listener and janitor).  This is the one
package of the server side that opens nurseries for work that outlives a
request; :mod:`trio_mcp_cancel._protocol` stays I/O-free and never imports
it.
"""

from .extension import Tasks
from .manager import TaskManager

__all__ = ["TaskManager", "Tasks"]
