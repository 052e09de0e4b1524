"""What the tests share that is not a test: harnesses, test servers and helpers.

Test modules import from here (``from _support.asgi import served``; pytest
puts ``tests/`` on the path) and never from one another, so a test file can
move between folders or go away without breaking another
(``tests/project/test_test_layout.py`` checks it).  Subprocess tests put
``tests/`` on ``PYTHONPATH`` the same way (``_support.runner_app:server``).

* ``asgi``: the HTTP app driven in memory, as hypercorn delivers requests.
* ``client``: servers for the client's tests (in-process hypercorn, Node).
* ``deploy``: hypercorn and redis-server processes, as deployed.
* ``oauth``: an authorization server (metadata, JWKS, introspection).
* ``otel``: a real OpenTelemetry SDK, in memory, per test.
* ``redis``: the ``redis`` fixture (a real redis-server) and its helpers.
* ``stdio``: MCP over a launched server process's stdin and stdout.
* ``latency_proxy``: a TCP proxy that delays every chunk (a slow Redis).
* ``cancellation_tools``: the probe tools (``echo``, ``stubborn``, ...).
* ``repo_paths``: where the repository's folders are.
* ``runner_app``, ``sdk_server_app``, ``tool_types_module``: servers and a
  tool module that tests start or import as an application would.
"""
