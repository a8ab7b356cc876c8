"""Security on the netns LAN (:mod:`.netns_lan`): nodes with CURVE keys, client
permissions and allowlists, discovery on. Discovered peers link only where both allow
each other; a peer nobody allows is never dialled and its handshakes are refused and
counted; keyed clients publish and subscribe across the secure link.

The network is kept apart as :mod:`.netns_lan` says (mDNS never leaves the namespaces);
the module's capture on eth0 is checked at the module's end by the guard itself."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.netns_lan import WAIT, ZBROKER, Net, endpoint, require_netns, v4
from tests.integration.netns_lan import eth0_guard as eth0_guard  # (fixtures)
from tests.integration.netns_lan import group as group
from tests.integration.netns_lan import net as net
from tests.integration.netns_views import poll_routes

require_netns()

pytestmark = pytest.mark.slow

#: the namespace each node runs in: n0, the lowest ID, dials every pair it is in
WHERE = {"n0": 3, "n1": 1, "n2": 2}


def keygen(*args: str) -> None:
    """``zbroker keygen`` (local files only: no network, so outside the namespaces)."""
    res = subprocess.run([ZBROKER, "keygen", *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


class Keys:
    """The node keys of n0, n1 and n2 (in their data directories), the client alice's keys
    and permissions, and two allowlists: ``allow12`` (n1 and n2) and ``allow-all``."""

    def __init__(self, net: Net, tmp_path: Path) -> None:
        self.net = net
        self.tmp_path = tmp_path
        for node_id in WHERE:
            keygen("--data-dir", str(tmp_path / f"data-{node_id}"))
        keygen("--out", str(tmp_path / "keys"), "--name", "alice")
        self.alice = str(tmp_path / "keys" / "alice.key_secret")
        allow12, allow_all = tmp_path / "allow12", tmp_path / "allow-all"
        for d, ids in ((allow12, ("n1", "n2")), (allow_all, ("n0", "n1", "n2"))):
            d.mkdir()
            for node_id in ids:
                shutil.copy(tmp_path / f"data-{node_id}" / "node.key", d / f"{node_id}.key")
        self.clients = tmp_path / "clients.toml"
        self.clients.write_text(
            f'[alice]\nkey_file = "{tmp_path / "keys" / "alice.key"}"\n'
            'publish = ["SEC.>"]\nsubscribe = ["SEC.>"]\nmonitor = true\n'  # (status, routes)
        )

    def node_options(self, allowlist: str) -> tuple[str, ...]:
        """``zbroker start``'s security options, with the allowlist directory named."""
        return (
            "--secure",
            "--clients",
            str(self.clients),
            "--allowlist",
            str(self.tmp_path / allowlist),
        )

    def keyed(self, node_id: str) -> tuple[str, ...]:
        """A CLI command's options to talk to ``node_id`` as alice."""
        server_key = str(self.tmp_path / f"data-{node_id}" / "node.key")
        return ("--keys", self.alice, "--server-key", server_key)

    def status(self, node_id: str) -> Any:
        i = WHERE[node_id]
        return self.net.cli(
            i,
            "status",
            "--json",
            "--broker",
            endpoint(v4(i)),
            "--timeout",
            "3",
            *self.keyed(node_id),
        )


def links_up(st: Any) -> list[str]:
    return sorted(ln["peer"] for ln in st["links"] if ln["state"] == "up")


def poll_allowlisted_mesh(keys: Keys) -> tuple[bool, dict[str, Any]]:
    """Poll every node's status until n1 and n2 are linked to each other only and each
    has refused a handshake (n0's), or WAIT has passed: (done, the last statuses)."""
    deadline = time.monotonic() + WAIT
    while True:
        views = {node_id: keys.status(node_id) for node_id in WHERE}
        done = all(v is not None for v in views.values()) and (
            links_up(views["n1"]) == ["n2"]
            and links_up(views["n2"]) == ["n1"]
            and views["n1"]["counters"]["auth_failures"] >= 1
            and views["n2"]["counters"]["auth_failures"] >= 1
        )
        if done or time.monotonic() > deadline:
            return done, views
        time.sleep(0.2)  # pacing of the poll only


def test_secure_discovery_links_only_allowlisted_peers(
    net: Net, group: str, tmp_path: Path
) -> None:
    """Security on, discovery on: n1 and n2 allow each other and link over CURVE; n0 (the
    lowest ID, so the dialer of every pair it is in) is in nobody's allowlist: n1 and n2
    never dial it and refuse its handshakes, counting them. A client with keys publishes
    on n1; its messages reach a client with keys on n2, each exactly once."""
    n = 20
    keys = Keys(net, tmp_path)
    net.start_node(1, "n1", group, extra=keys.node_options("allow12"))
    net.start_node(2, "n2", group, extra=keys.node_options("allow12"))
    rogue = net.start_node(3, "n0", group, extra=keys.node_options("allow-all"))
    done, views = poll_allowlisted_mesh(keys)
    assert done, views
    assert links_up(views["n0"]) == [], views["n0"]["links"]
    assert views["n0"]["counters"]["links_up"] == 0
    for node_id in ("n1", "n2"):
        st = views[node_id]
        assert st["security"]["enabled"] is True
        assert st["counters"]["links_up"] == 1, (node_id, st["counters"])
        # n0 was seen on the LAN but never dialled: no link toward it exists at all
        assert "n0" not in [ln["peer"] for ln in st["links"]], st["links"]
    (link,) = views["n1"]["links"]
    assert (link["kind"], link["peer"]) == ("discovered", "n2")  # the lower ID dialled
    assert rogue.poll() is None

    sub = net.start(
        2, ZBROKER, "sub", "SEC.>", "--broker", endpoint(v4(2)), "--count", str(n),
        "--json", "--timeout", "10", *keys.keyed("n2"),
    )  # fmt: skip
    assert sub.wait_stderr("subscribed to SEC.>", WAIT), sub.stderr_text()
    routes = poll_routes(
        net, 1, "SEC.x", lambda rs: any(r["origin"] == "n2" for r in rs), *keys.keyed("n1")
    )
    assert any(r["origin"] == "n2" for r in routes), routes
    body = "".join(f"{k}\n" for k in range(n))
    res = net.run(
        1, "pub", "SEC.x", "-", "--broker", endpoint(v4(1)), "--timeout", "10",
        *keys.keyed("n1"), input=body,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sub.wait(20) == 0, sub.stderr_text()
    lines = [json.loads(x) for x in sub.stdout_text().splitlines() if x.strip()]
    assert [(e["topic"], e["payload"]) for e in lines] == [("SEC.x", str(k)) for k in range(n)]
