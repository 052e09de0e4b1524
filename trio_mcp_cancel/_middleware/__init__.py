"""The built-in middleware (:mod:`trio_mcp_cancel.middleware` exports them)."""
