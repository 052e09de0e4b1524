"""What client and server share on the wire, below everything else but the kernel.

* :mod:`.names`: method names, ``_meta`` keys, error codes, header rules,
  the Tasks extension's status vocabulary;
* :mod:`.jsonrpc`: JSON-RPC 2.0 message shapes, their classification and
  encoding, and :class:`~.jsonrpc.JsonRpcError`;
* :mod:`.versions`: the protocol versions of both eras and the modern
  ``_meta`` envelope.

Data and pure functions only: no I/O, no state.  This package imports
:mod:`trio_mcp_cancel._core` and nothing else of the library, so the
client, the server's protocol layer, the backends and the transports all
read one spelling of every name without importing each other.
"""
