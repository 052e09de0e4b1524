"""The README's code must work as written: its code blocks run here verbatim.

Blocks are found by a needle string they contain.  The user's path is run
end to end: the smallest server is imported and listed, the test file runs
under pytest in a temporary project with the README's pytest configuration,
and the desktop host's JSON starts that server over stdio.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _support.repo_paths import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _block(needle: str, language: str = "python", text: str = README) -> str:
    """The one code block of *language* in *text* that contains *needle*."""
    found = [
        block
        for block in re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)
        if needle in block
    ]
    assert len(found) == 1, f"{len(found)} {language} blocks contain {needle!r}"
    return found[0]


TESTING_DOC = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")

# The registry-level test of docs/testing.md: defined in this module, so pytest
# collects and runs it as written.
exec(
    compile(_block("def test_my_tool_stops_when_cancelled", text=TESTING_DOC), "testing.md", "exec")
)

_SERVER = _block('McpServer("weather")')  # "The smallest server"
_TEST_FILE = _block("from weather import server")  # "Test it"
_weather: dict[str, object] = {}
exec(compile(_SERVER, "README.md", "exec"), _weather)

_features: dict[str, object] = {}
exec(compile(_block('McpServer("features-demo")'), "README.md", "exec"), _features)

_deploy: dict[str, object] = {}
exec(compile(_block("await serve(app"), "README.md", "exec"), _deploy)


async def test_the_smallest_server_lists_its_tools_with_their_schemas() -> None:
    from trio_mcp_cancel.testing import open_test_client

    async with open_test_client(_weather["server"]) as client:  # type: ignore[arg-type]
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        assert set(tools) == {"forecast", "add"}
        schema = tools["forecast"]["inputSchema"]
        assert schema["required"] == ["city"]
        assert schema["properties"]["city"] == {"type": "string", "description": "a city name"}
        assert schema["properties"]["unit"]["enum"] == ["C", "F"]
        assert tools["forecast"]["outputSchema"]["required"] == ["city", "days"]
        assert (await client.call_tool("add", {"a": 2, "b": 3}))["content"][0]["text"] == "5"


def _project(tmp_path: Path) -> Path:
    """A user's project as the README builds it: the server, the test file, the pytest config."""
    (tmp_path / "weather.py").write_text(_SERVER, encoding="utf-8")
    (tmp_path / "test_weather.py").write_text(_TEST_FILE, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(_block("trio_mode", "toml"), encoding="utf-8")
    return tmp_path


@pytest.mark.subprocess
def test_the_test_file_passes_under_pytest_with_the_readme_config(tmp_path: Path) -> None:
    project = _project(tmp_path)
    expected = len(re.findall(r"^async def test_", _TEST_FILE, flags=re.M))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHONPATH"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_weather.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{expected} passed" in done.stdout, done.stdout


@pytest.mark.subprocess
async def test_the_host_config_runs_the_server_over_stdio(tmp_path: Path) -> None:
    """The JSON a desktop host is given parses, and its command serves the README's server."""
    import trio

    config = json.loads(_block('"mcpServers"', "json"))
    (entry,) = config["mcpServers"].values()
    assert entry["command"].endswith("/bin/trio-mcp-cancel")
    command = Path(sys.executable).parent / "trio-mcp-cancel"
    env = {**os.environ, "PYTHONPATH": str(_project(tmp_path))}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "host", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    answers: dict[int, dict[str, object]] = {}
    process = await trio.lowlevel.open_process(
        [str(command), *entry["args"]],
        cwd=tmp_path.parent,  # not the project: PYTHONPATH must be what finds weather.py
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        with trio.fail_after(60):
            await process.stdin.send_all("".join(json.dumps(m) + "\n" for m in lines).encode())
            buffer = b""
            while 2 not in answers:
                chunk = await process.stdout.receive_some()
                assert chunk, "the server closed stdout before answering"
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                answers.update((m["id"], m) for m in map(json.loads, complete))
            await process.stdin.aclose()  # the host goes away: a clean exit
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert answers[1]["result"]["serverInfo"]["name"] == "weather"  # type: ignore[index]
    assert {t["name"] for t in answers[2]["result"]["tools"]} == {"forecast", "add"}  # type: ignore[index]


def _run_targets() -> list[str]:
    """The ``MODULE:ATTR`` of every ``trio-mcp-cancel run`` in the README's and deployment's sh."""
    texts = [README, (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")]
    return [
        spec
        for text in texts
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)
        for spec in re.findall(r"trio-mcp-cancel run (\S+)", block)
    ]


@pytest.mark.subprocess
def test_every_run_command_serves_a_module_of_the_users_project(tmp_path: Path) -> None:
    """Run from the README's project, each command finds its target there (not in examples/)."""
    targets = sorted(set(_run_targets()))
    assert len(_run_targets()) >= 5, _run_targets()  # Run it, Deploy, Authorization
    project = _project(tmp_path)
    for spec in targets:
        module = spec.partition(":")[0]
        assert (project / f"{module.replace('.', '/')}.py").exists(), (
            f"{spec}: not the user's module"
        )
    script = (
        "import sys\nfrom trio_mcp_cancel._run import target\n"
        "for spec in sys.argv[1:]:\n    target.http_app(target.load(spec))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *targets],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_install_section_names_the_placeholder_url_of_pyproject() -> None:
    import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert f"pip install git+{urls['Source']}" in _block("pip install git+", "sh")


def test_the_extras_table_names_every_extra_of_pyproject() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    install = README[README.index("## Install") : README.index("## The smallest server")]
    table = "\n".join(line for line in install.splitlines() if line.startswith("| `"))
    assert [e for e in extras if f"`{e}`" not in table] == []
    assert (
        "opentelemetry-sdk" in README[README.index("## Observability") : README.index("## Deploy")]
    )


def test_the_contributor_test_command_is_the_one_ci_runs() -> None:
    assert "python3 dev.py test" in _block("python3 dev.py test", "sh")
    assert "\npython3 dev.py test\n" in (ROOT / ".ci" / "run").read_text()


async def test_the_deploy_example_defines_its_server_and_main() -> None:
    from trio_mcp_cancel.server import McpServer

    server = _deploy["server"]
    assert isinstance(server, McpServer)
    assert set(server.registration.tools) == {"slow"}
    assert callable(_deploy["main"])


async def test_the_features_example_serves_what_it_says(autojump_clock: object) -> None:
    from trio_mcp_cancel.testing import open_test_client

    server = _features["server"]
    caps = {"elicitation": {}}
    async with open_test_client(server, client_capabilities=caps, log_level="info") as client:
        assert (await client.call_tool("lookup", {"city": "Oslo"}))["content"][0]["text"] == (
            "Oslo: 3 results"
        )
        assert (await client.call_tool("lookup", {"city": "Atlantis"}))["isError"] is True
        assert [m["data"] for m in client.log_messages] == ["looking up Oslo"]
        assert [c["type"] for c in (await client.call_tool("chart"))["content"]] == [
            "text",
            "image",
        ]
        assert (await client.call_tool("add", {"a": 1, "b": 2}))["structuredContent"] == {"sum": 3}
        tools = {t["name"]: t for t in (await client.request("tools/list"))["tools"]}
        assert tools["hello"]["inputSchema"]["additionalProperties"] is False
        user = await client.request("resources/read", {"uri": "db://users/42"})
        assert user["contents"][0]["text"] == '{"id": "42"}'
        review = await client.request("prompts/get", {"name": "review", "arguments": {"path": "a"}})
        assert review["messages"][0]["content"]["type"] == "resource"
        asked = await client.call_tool("delete", {"item": "x"})
        assert asked["resultType"] == "input_required"
        retry = {
            "name": "delete",
            "arguments": {"item": "x"},
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
            "requestState": asked["requestState"],
        }
        assert (await client.request("tools/call", retry))["content"][0]["text"] == "deleted x"


def test_the_readme_examples_were_loaded() -> None:
    assert "test_my_tool_stops_when_cancelled" in globals()
    assert "server" in _features and "server" in _weather


# The "where the work runs" examples: a build tool, a sync tool, a gateway tool.
_work: dict[str, object] = {}
for _needle in ("async def build(", "def checksum(", "async def ask_upstream("):
    exec(compile(_block(_needle), "README.md", "exec"), _work)


async def test_the_readme_work_tools_register_and_the_sync_one_runs(tmp_path: Path) -> None:
    from trio_mcp_cancel.server import McpServer
    from trio_mcp_cancel.testing import open_test_client

    server = _work["server"]
    assert isinstance(server, McpServer)
    assert set(server.registration.tools) == {"build", "checksum", "ask_upstream", "run_job"}
    data = tmp_path / "data"
    data.write_bytes(b"abc" * 1000)
    async with open_test_client(server) as client:
        result = await client.call_tool("checksum", {"path": str(data)})
    expected = sum(b"abc" * 1000) % (1 << 61)
    assert result["content"][0]["text"] == f"{expected:x}"
