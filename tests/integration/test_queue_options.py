"""A queue group member with a selector is refused, in the API and the CLI: the members
of a group compete for every message of its pattern (was: the selector was silently
dropped, and the member got messages it had said it did not want)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.helpers import Collector
from tests.integration.cli_runs import invoke
from zbroker import Broker, Client, ConfigError

ClientFactory = Callable[..., Client]


def test_a_queue_member_with_a_selector_is_refused(
    broker: Broker, client_factory: ClientFactory
) -> None:
    c = client_factory(broker.endpoint)
    with pytest.raises(ConfigError, match=r"queue group member takes no selector"):
        c.subscribe("jobs.>", Collector(), queue="workers", selector="r = 'EU'")
    assert broker.status()["queues"] == []  # (nothing joined)
    result = invoke("sub", "jobs.>", "--queue", "workers", "--selector", "r = 'EU'")
    assert result.exit_code == 2, result.output
    assert "--queue takes no --selector" in result.stderr
