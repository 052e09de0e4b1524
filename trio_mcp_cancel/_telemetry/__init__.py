"""OpenTelemetry traces and metrics, optional: nothing here is needed to serve.

Everything that touches ``opentelemetry`` lives in this package and imports
it lazily (:mod:`.otel`), so a server without ``opentelemetry-api`` pays one
``None`` check per request and never imports it.  :mod:`.names` holds the
attribute and instrument names (the MCP semantic conventions plus the
project's own ``mcp_cancel.*``), :mod:`.server` the server span and metrics,
:mod:`.propagation` what the library's own client passes downstream.
"""
