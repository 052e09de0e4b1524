from __future__ import annotations

import pytest

from trio_mcp_cancel._core.validation import is_valid_request_id, sanitize_reason
from trio_mcp_cancel.lowlevel import InvalidRequestId, validate_request_id
from trio_mcp_cancel.lowlevel.wire import MAX_ID_BYTES


@pytest.mark.parametrize(
    "request_id",
    [0, 1, -7, 2**63, "", "1", "a" * MAX_ID_BYTES, "é" * (MAX_ID_BYTES // 2), 10**255],
)
def test_valid_ids(request_id: object) -> None:
    assert is_valid_request_id(request_id)
    assert validate_request_id(request_id) == request_id


@pytest.mark.parametrize(
    "request_id",
    [
        None,
        True,
        False,
        1.0,
        float("nan"),
        [1],
        {"id": 1},
        b"1",
        "a" * (MAX_ID_BYTES + 1),
        "é" * (MAX_ID_BYTES // 2 + 1),  # 258 bytes in 129 characters
        "\ud800",  # a lone surrogate cannot be encoded
        "\ud800" * 100,
        10**256,
        -(10**256),
    ],
)
def test_invalid_ids(request_id: object) -> None:
    assert not is_valid_request_id(request_id)
    with pytest.raises(InvalidRequestId, match="request id must be"):
        validate_request_id(request_id)


def test_int_subclass_is_refused() -> None:
    class Sneaky(int):
        def __hash__(self) -> int:
            raise RuntimeError("boom")

    assert not is_valid_request_id(Sneaky(1))


def test_invalid_request_id_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_request_id(None)


def test_reason_none_stays_none() -> None:
    assert sanitize_reason(None) is None


def test_reason_strips_control_and_format_characters() -> None:
    assert sanitize_reason("a\x00b\x1bc\x7fd\u202ee\u200bf") == "abcdef"
    assert sanitize_reason("line one\nline\ttwo\r\n") == "line one line two"


def test_reason_is_truncated() -> None:
    assert sanitize_reason("x" * 1000) == "x" * 256
    assert sanitize_reason("x" * 1000, max_length=10) == "x" * 10
    # Characters removed before the cut do not count against the limit.
    assert sanitize_reason("\x00" * 5 + "abc", max_length=3) == "abc"


def test_huge_reason_is_cut_before_it_is_scanned() -> None:
    assert sanitize_reason("y" * 10_000_000, max_length=4) == "yyyy"


def test_non_string_reason_is_rendered() -> None:
    assert sanitize_reason(42) == "42"
    assert sanitize_reason({"a": "\x00"}) == "{'a': '\\x00'}"


def test_unicode_text_survives() -> None:
    assert sanitize_reason("Abgebrochen: zu langsam 🐢") == "Abgebrochen: zu langsam 🐢"
