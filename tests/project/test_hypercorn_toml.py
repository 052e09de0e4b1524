"""``examples/hypercorn.toml`` sets what ``server_config()`` sets, so the two cannot drift."""

from __future__ import annotations

import inspect
import tomllib

from hypercorn.config import Config

from trio_mcp_cancel.http import server_config
from trio_mcp_cancel.transports.http.serving import _is_setting

from _support.repo_paths import ROOT

TOML = ROOT / "examples" / "hypercorn.toml"
#: What the file sets for the hypercorn CLI only, and what is derived from other settings.
NOT_COMPARED = {"bind", "worker_class", "log"}


def readable(name: str) -> bool:
    attribute = inspect.getattr_static(Config, name)
    return not isinstance(attribute, property) or attribute.fget is not None


def settings(config: Config) -> dict[str, object]:
    """Every setting of *config* that can be read back (``cert_reqs`` is write-only)."""
    return {
        name: getattr(config, name)
        for name in dir(Config)
        if _is_setting(name) and readable(name) and name not in NOT_COMPARED
    }


def test_every_setting_of_the_toml_file_equals_server_config() -> None:
    loaded, wanted = settings(Config.from_toml(TOML)), settings(server_config())
    assert loaded == wanted
    # Not vacuous: the defaults differ from server_config() in some of them.
    assert settings(Config()) != wanted


def test_the_toml_file_names_only_real_settings() -> None:
    # Config.from_toml would keep a misspelt key as a stray attribute, silently.
    keys = tomllib.loads(TOML.read_text())
    assert all(_is_setting(key) for key in keys), [k for k in keys if not _is_setting(k)]
    assert keys["worker_class"] == "trio" and keys["bind"] == ["127.0.0.1:8000"]
