"""What the tests of zbroker.config (``tests/test_config*.py``) share: the rule a bad
broker ID's message quotes, and :func:`write_config`, a config file in ``tmp_path``."""

from __future__ import annotations

from pathlib import Path

ID_RULE = (
    "is not a valid name (1-64 characters of letters, digits, '_', '.', '-', "
    "starting with a letter or digit)"
)


def write_config(tmp_path: Path, text: str | bytes, name: str = "zbroker.toml") -> Path:
    """``text`` (UTF-8 if a str) as the file ``name`` in ``tmp_path``; its path."""
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return path
