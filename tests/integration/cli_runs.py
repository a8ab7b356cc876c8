"""Running the ``zbroker`` command line in the CLI tests (``test_*cli*.py``): in-process
with click's CliRunner (``invoke``: the caller's ZBROKER_* variables unset), the checks of
a user error (exactly one line on stderr, no traceback), and the rows of a plain table."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from click.testing import CliRunner, Result

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
else:
    from zbroker.cli.main import cli

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process. ZBROKER_* variables of the caller's environment are unset."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZBROKER_")}
    clean.update(env or {})
    return CliRunner().invoke(cli, list(args), input=input, env=clean)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """A user error: non-zero exit, exactly one non-empty line on stderr, no traceback."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_one_line_stderr(text: str, *needles: str) -> str:
    """The stderr of a command run as a process: one non-empty line, no traceback."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert "Traceback" not in text
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def table(text: str) -> list[list[str]]:
    """Rows of a plain table (columns are separated by two or more spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]
