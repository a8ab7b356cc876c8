"""How a message's headers become a row's ``map<string,string>`` (no Spark session)."""

from __future__ import annotations

from zbroker.spark.arrow import _headers


def test_header_values_read_as_text_and_none_as_null() -> None:
    assert _headers({"a": "x", "b": 1, "c": None, "d": [1]}) == [
        ("a", "x"),
        ("b", "1"),
        ("c", None),
        ("d", "[1]"),
    ]
    assert _headers(None) is None
    assert _headers({}) == []
