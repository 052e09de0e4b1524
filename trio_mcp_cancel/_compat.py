"""What every module that reaches into another library's internals shares.

Three modules do (``transports.http.hypercorn_compat``,
``_client.httpcore2_compat``, ``_telemetry.otel_compat``), and each keeps
the same promise: it touches those internals only on the releases it was
written for, and an environment variable turns it off.  The release check
and the switch are spelled once, here, so the three agree on what "off"
means and on how a release is compared.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Final

__all__ = ["OFF", "Range", "installed", "release", "switched_off", "why_off"]

#: The values of a switch variable that turn its module off (any case, spaces ignored).
OFF: Final = frozenset({"0", "off", "false", "no"})


def installed(distribution: str) -> str | None:
    """The installed release of *distribution* (``None``: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def release(version: str, parts: int = 2) -> tuple[int, ...]:
    """The first *parts* numbers of *version*, to compare with a checked range.

    Suffixes are read for their digits (``16rc1`` -> 161 is never wanted, so
    only the leading digits count: ``16rc1`` -> 16); a part without digits is 0.
    """
    numbers = []
    for part in version.split(".")[:parts]:
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        numbers.append(int(digits or "0"))
    return tuple(numbers)


def switched_off(variable: str) -> bool:
    """Whether the environment variable *variable* turns its module off."""
    return os.environ.get(variable, "").strip().lower() in OFF


Range = tuple[tuple[int, ...], tuple[int, ...]]
"""The first and last release (major, minor) a module was checked against."""


def why_off(variable: str, distribution: str, version: str | None, checked: Range) -> str:
    """Why a module's reach into *distribution* stays off here (``""``: it may run).

    Off when *variable* switches it off, when *distribution* is not
    installed, or when its *version* is outside the *checked* releases.
    """
    if switched_off(variable):
        return f"{variable} turned it off"
    if version is None:
        return f"{distribution} is not installed"
    first, last = checked
    if not first <= release(version) <= last:
        return f"{distribution} {version} is not a release it was checked against"
    return ""
