"""``zbroker sub PATTERN --selector EXPR``: a bad expression is a one-line usage error; a
good one prints only what it selects (a real ``zbroker sub`` process)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from zbroker import Broker, Client

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.format import format_routes
    from cli.main import cli
else:
    from zbroker.cli.format import format_routes
    from zbroker.cli.main import cli

WAIT = 20.0


def test_bad_selector_is_a_one_line_usage_error(broker: Broker) -> None:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("ZBROKER_")}
    r = CliRunner().invoke(
        cli, ["sub", "A.>", "--broker", broker.endpoint, "--selector", "qty >> 1"], env=clean
    )
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "selector error at position 5: expected a header name, a literal or '('" in r.output
    # with --durable too: refused before anything connects (nothing listens at x:1)
    r = CliRunner().invoke(
        cli, ["sub", "A.>", "--durable", "d", "--selector", "qty >> 1", "--broker", "tcp://x:1"]
    )
    assert r.exit_code == 2 and "selector error at position 5" in r.output


@pytest.mark.slow
def test_sub_selector_prints_only_what_it_selects(
    broker: Broker,
    procs: Any,
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    sub = procs.zbroker(
        "sub", "SEL.>", "--broker", broker.endpoint, "--selector", "qty > 5", "--count", "3",
        "--json",
    )  # fmt: skip
    assert wait_until(
        lambda: "SEL.>" in broker.status()["subscriptions"]["patterns"] or sub.poll() is not None,
        WAIT,
    )
    pub = client_factory(broker.endpoint)
    for i in range(10):
        pub.publish("SEL.x", i, {"qty": i})
    assert sub.wait(WAIT) == 0, sub.stderr_text()
    lines = [json.loads(line) for line in sub.stdout_text().splitlines()]
    assert [o["payload"] for o in lines] == [6, 7, 8] and {o["pattern"] for o in lines} == {"SEL.>"}


def test_routes_table_marks_selectors_and_local_branches() -> None:
    rows = [
        {"pattern": "A.>", "origin": "N2", "hops": 1, "path": ["N2"], "link": "l1",
         "selectors": ["(q > 1)", "(r = 'x')"]},
        {"pattern": "C.>", "origin": "N1", "hops": 0, "path": [], "link": None,
         "local_branch": True},
    ]  # fmt: skip
    text = format_routes(rows)
    assert "A.> where (q > 1) OR (r = 'x')" in text
    assert "C.> (local branch)" in text
