"""The ``trio-mcp-cancel`` command: serve a module's server, and supervise HTTP workers.

``cli`` parses the command line; ``target`` imports ``MODULE:ATTR``;
``supervisor`` keeps ``--workers N`` worker processes (``worker``) serving
one listening socket.  Private: the command line is the interface.
"""
