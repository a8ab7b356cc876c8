"""Security building blocks without sockets: pattern coverage, key files, allowlist and
permission files, the ``[security]`` config table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from click.testing import CliRunner

from cli.main import cli
from zbroker import Broker, Client, wire
from zbroker.config import config_from_mapping, load_config, peer_link
from zbroker.errors import ConfigError
from zbroker.security import (
    Security,
    covers,
    generate_keys,
    load_allowlist,
    load_clients,
    load_key_pair,
    read_public_key,
)


@pytest.mark.parametrize(
    ("allowed", "pattern", "expected"),
    [
        (">", "A", True),
        (">", "A.>", True),
        ("A.>", "A.B", True),
        ("A.>", "A.*", True),
        ("A.>", "A.>", True),
        ("A.>", "A", False),
        ("A.>", "B.>", False),
        ("A.>", ">", False),
        ("A.*", "A.B", True),
        ("A.*", "A.*", True),
        ("A.*", "A.>", False),
        ("A.*", "A.B.C", False),
        ("A.B", "A.B", True),
        ("A.B", "A.*", False),
        ("*.B", "X.B", True),
        ("*.B", "*.B", True),
        ("*.B", "*.C", False),
        ("A.*.C", "A.*.C", True),
        ("A.*.C", "A.*.>", False),
        # a leading wildcard matches no $ZB topic, so it permits no $ZB pattern
        (">", "$ZB.ADVISORY.>", False),
        ("*.>", "$ZB.SYS.a.STATS", False),
        ("$ZB.>", "$ZB.ADVISORY.>", True),
    ],
)
def test_covers(allowed: str, pattern: str, expected: bool) -> None:
    assert covers(allowed, pattern) is expected


def test_generate_keys_is_idempotent_and_private(tmp_path: Path) -> None:
    secret, created = generate_keys(tmp_path / "k")
    assert created is True
    assert secret == tmp_path / "k" / "node.key_secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    first = load_key_pair(secret)
    again, created = generate_keys(tmp_path / "k")
    assert (again, created) == (secret, False)
    assert load_key_pair(tmp_path / "k") == first  # a directory means its node.key_secret
    assert read_public_key(tmp_path / "k" / "node.key") == first[0]
    assert read_public_key(first[0].decode()) == first[0]
    assert load_key_pair(first[1].decode()) == first  # the Z85 secret key as text
    assert zmq.curve_public(first[1]) == first[0]


def test_a_secret_key_is_never_readable_by_others_while_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyzmq writes a certificate under the umask; where it writes the secret must be
    closed to others until the file is private. (Before: 0644 in the key directory, and
    chmod 0600 only after.)"""
    written: list[tuple[int, int]] = []  # (file mode, directory mode) as pyzmq left them
    real = zmq.auth.create_certificates

    def spy(directory: Any, name: str, metadata: Any = None) -> tuple[str, str]:
        public, secret = real(directory, name, metadata)
        mode = Path(secret).stat().st_mode & 0o777
        written.append((mode, Path(secret).parent.stat().st_mode & 0o777))
        return public, secret

    monkeypatch.setattr(zmq.auth, "create_certificates", spy)
    old = os.umask(0o022)
    try:
        secret, created = generate_keys(tmp_path / "k", "alice")
    finally:
        os.umask(old)
    assert created and len(written) == 1
    file_mode, dir_mode = written[0]
    assert not (file_mode & 0o077 and dir_mode & 0o077)
    assert secret.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["alice.key", "alice.key_secret"]
    assert read_public_key(tmp_path / "k" / "alice.key") == load_key_pair(secret)[0]


def test_public_file_without_secret_is_not_overwritten(tmp_path: Path) -> None:
    generate_keys(tmp_path, "x")
    (tmp_path / "x.key_secret").unlink()
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        generate_keys(tmp_path, "x")
    with pytest.raises(ConfigError, match="no key pair"):
        load_key_pair(tmp_path / "x.key_secret")
    with pytest.raises(ConfigError, match="no secret key"):
        load_key_pair(tmp_path / "x.key")


def test_allowlist_directory_and_file(tmp_path: Path) -> None:
    keys = {}
    for name in ("alpha", "beta"):
        generate_keys(tmp_path / "src", name)
        keys[name] = read_public_key(tmp_path / "src" / f"{name}.key")
    d = tmp_path / "allow"
    d.mkdir()
    for name in keys:
        (d / f"{name}.key").write_bytes((tmp_path / "src" / f"{name}.key").read_bytes())
    (d / "ignored.key_secret").write_text("not read")
    assert load_allowlist(d) == keys
    f = tmp_path / "allow.txt"
    f.write_text(f"# peers\nalpha {keys['alpha'].decode()}\n\nbeta {keys['beta'].decode()}  # b\n")
    assert load_allowlist(f) == keys
    f.write_text(f"alpha {keys['alpha'].decode()}\ngamma {keys['alpha'].decode()}\n")
    with pytest.raises(ConfigError, match="one key, one ID"):
        load_allowlist(f)
    hashed = next(k for k in (zmq.curve_keypair()[0] for _ in range(1000)) if b"#" in k)
    f.write_text(f"alpha {hashed.decode()}  # '#' is a Z85 digit too\n")
    assert load_allowlist(f) == {"alpha": hashed}
    f.write_text("alpha notakey\n")
    with pytest.raises(ConfigError, match="line 1: expected 'BROKER_ID PUBLIC_KEY'"):
        load_allowlist(f)
    with pytest.raises(ConfigError, match="cannot read"):
        load_allowlist(tmp_path / "missing")


def test_client_permissions(tmp_path: Path) -> None:
    generate_keys(tmp_path, "alice")
    key = read_public_key(tmp_path / "alice.key")
    f = tmp_path / "clients.toml"
    f.write_text(
        '[alice]\nkey_file = "alice.key"\npublish = ["A.>"]\nsubscribe = ["B.*"]\n'
        "monitor = true\n"
        f'[bob]\nkey = "{zmq.curve_keypair()[0].decode()}"\n'
    )
    rules = load_clients(f)
    assert rules["alice"].key == key
    assert rules["alice"].publish == ("A.>",)
    assert rules["alice"].monitor is True
    assert rules["bob"].publish == () and rules["bob"].subscribe == ()
    assert rules["bob"].monitor is False  # (the default: status, routes, peers refused)
    bad = {
        "nokey": ({"publish": []}, "exactly one of key"),
        "badpat": ({"key": key.decode(), "publish": ["A.>.B"]}, "publish"),
        "extra": ({"key": key.decode(), "admin": True}, "unknown key"),
        "nofile": (
            {"key_file": str(tmp_path / "gone.key")},
            r"\[security.clients\]: client 'nofile': key_file: '.*gone.key' is neither",
        ),
        "intfile": ({"key_file": 5}, "client 'intfile': key_file must be the path"),
        "monitor1": ({"key": key.decode(), "monitor": 1}, "client 'monitor1': monitor must be"),
        "monitorstr": ({"key": key.decode(), "monitor": "yes"}, "monitor must be true or false"),
        "nofilename": ({"key_file": ""}, "client 'nofilename': key_file must be the path"),
    }
    for name, (entry, message) in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_clients({name: entry})
    with pytest.raises(ConfigError, match="same key"):
        load_clients({"a": {"key": key.decode()}, "b": {"key": key.decode()}})


def test_security_decisions(tmp_path: Path) -> None:
    generate_keys(tmp_path)
    sec = Security(
        tmp_path,
        None,
        {"alice": {"key": zmq.curve_keypair()[0].decode(), "publish": ["A.>"], "subscribe": []}},
    )
    assert sec.may_publish("client:alice", "A.B")
    assert not sec.may_publish("client:alice", "B.B")
    assert not sec.may_publish("client:mallory", "A.B")
    assert not sec.may_publish("node:x", "A.B")  # nodes are not clients
    assert not sec.may_subscribe("client:alice", "A.>")
    # a pattern (a state removal's) needs a publish permission covering it
    assert sec.may_publish("client:alice", "A.*") and sec.may_publish("client:alice", "A.>")
    narrow = Security(
        tmp_path, None, {"s": {"key": zmq.curve_keypair()[0].decode(), "publish": ["S.*"]}}
    )
    assert narrow.may_publish("client:s", "S.*") and narrow.may_publish("client:s", "S.X")
    assert not narrow.may_publish("client:s", "S.>")
    alice = {"publish": ["A.>"], "subscribe": [], "monitor": False}
    assert sec.permissions("client:alice") == alice
    assert sec.permissions("node:x") is None
    # the node's own view (status, routes, peers): only with monitor = true
    assert not sec.may_monitor("client:alice") and not sec.may_monitor("node:x")
    watcher = Security(
        tmp_path, None, {"w": {"key": zmq.curve_keypair()[0].decode(), "monitor": True}}
    )
    assert watcher.may_monitor("client:w") and not watcher.may_monitor("client:mallory")
    msg = sec.refuse("publish to", "client:alice", "B.B")
    assert msg == "permission denied: client:alice may not publish to 'B.B'"
    assert sec.refused == {"publish": 1}
    # every client may publish everywhere: nothing to filter, the socket's own recv is used
    everyone = Security(
        tmp_path, None, {"a": {"key": zmq.curve_keypair()[0].decode(), "publish": [">"]}}
    )
    ctx = zmq.Context()
    try:
        with ctx.socket(zmq.PULL) as pull:
            assert everyone.publish_recv(pull) == pull.recv
            assert sec.publish_recv(pull) != pull.recv
    finally:
        ctx.term()


def test_each_op_declares_its_permission_subject() -> None:
    """What a control request is checked against: (action, topic or pattern) per op, as
    the features declare them in the node's op table."""
    with Broker(port=0) as broker, Client(broker.endpoint) as client:
        client.subscribe("B.>", lambda m: None, durable="d1")

        def subjects(op: int, req: dict[str, Any]) -> list[tuple[str, str]] | None:
            def find(node: Any) -> list[tuple[str, str]] | None:
                served = node.control.op(op)
                assert served is not None, f"op {op} is served"
                return None if served.subjects is None else list(served.subjects(req))

            result: list[tuple[str, str]] | None = broker.call(find)
            return result

        assert subjects(wire.PUBLISH, {"topic": "A.B"}) == [("publish", "A.B")]
        assert subjects(wire.PUBLISH, {"topic": 7}) == []  # the handler rejects it
        rows = [["A.1", b"x", 0, None], ["A.2", b"y", 0, None], "junk", [], [3]]
        assert subjects(wire.STAGE, {"rows": rows}) == [("publish", "A.1"), ("publish", "A.2")]
        assert subjects(wire.STAGE, {"rows": "junk"}) == []
        for op in (wire.READ, wire.DURABLE_OPEN):
            assert subjects(op, {"pattern": "C.*"}) == [("subscribe", "C.*")]
            assert subjects(op, {}) == [("subscribe", ">")]  # no pattern: everything
        for op in (wire.DURABLE_ACK, wire.DURABLE_CLOSE, wire.DURABLE_DELETE):
            assert subjects(op, {"name": "d1"}) == [("subscribe", "B.>")]
            assert subjects(op, {"name": "unknown"}) == []
            assert subjects(op, {"name": 1}) == []
        for op, what in ((wire.STATUS, "status"), (wire.ROUTES, "routes"), (wire.PEERS, "peers")):
            assert subjects(op, {}) == [("monitor", what)]  # the node's whole view
        for op in (wire.HELLO, wire.PING, wire.STAGE_COMMIT, wire.STAGE_ABORT, wire.GAPS):
            assert subjects(op, {}) is None


def test_security_config_table(tmp_path: Path) -> None:
    cfg = config_from_mapping(
        {
            "security": {"enabled": True, "allowlist": "nodes", "clients": "clients.toml"},
            "link": [{"name": "to-b", "uri": "tcp://127.0.0.1:7200", "peer": "b"}],
        },
        str(tmp_path / "node.toml"),
    )
    assert cfg.security is True
    assert cfg.allowlist == tmp_path / "nodes"  # relative to the config file
    assert cfg.clients == tmp_path / "clients.toml"
    assert cfg.links[0].peer == "b"
    with pytest.raises(ConfigError, match="set peer"):
        config_from_mapping(
            {"security": {"enabled": True}, "link": [{"name": "x", "uri": "tcp://h:1"}]}, "f"
        )
    with pytest.raises(ConfigError, match=r"unknown key\(s\) security.allow"):
        config_from_mapping({"security": {"allow": "x"}}, "f")
    link = peer_link("beta@tcp://10.0.0.2:7100")
    assert (link.peer, link.uri) == ("beta", "tcp://10.0.0.2:7100")
    assert peer_link("tcp://10.0.0.2:7100").peer is None


def test_key_files_of_a_clients_table_are_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As every path of ``[security]``. (Before, a ``[security.clients]`` table's key_file
    was looked for in the working directory: the node did not start.)"""
    generate_keys(tmp_path / "node")
    generate_keys(tmp_path / "keys", "alice")
    config = tmp_path / "node.toml"
    config.write_text(
        f'[node]\nport = 0\ndata_dir = "{tmp_path / "node"}"\n'
        "[security]\nenabled = true\n"
        '[security.clients.alice]\nkey_file = "keys/alice.key"\npublish = ["A.>"]\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(config)
    assert cfg.clients == {
        "alice": {"key_file": str(tmp_path / "keys/alice.key"), "publish": ["A.>"]}
    }
    with Broker(cfg) as broker:
        node_key = str(tmp_path / "node" / "node.key")
        secret = str(tmp_path / "keys" / "alice.key_secret")
        with Client(broker.endpoint, keys=secret, server_key=node_key, timeout=5) as alice:
            assert alice.hello["user"] == "client:alice"


def test_keygen_command(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(cli, ["keygen", "--data-dir", str(tmp_path / "d")])
    assert first.exit_code == 0, first.output
    public = first.stdout.strip()
    assert public.encode() == read_public_key(tmp_path / "d" / "node.key")
    again = runner.invoke(cli, ["keygen", "--data-dir", str(tmp_path / "d")])
    assert again.exit_code == 0 and again.stdout.strip() == public
    client = runner.invoke(cli, ["keygen", "--out", str(tmp_path / "c"), "--name", "alice"])
    assert client.exit_code == 0
    assert (tmp_path / "c" / "alice.key_secret").exists()


def test_start_without_keys_says_how_to_make_them(tmp_path: Path, procs: Any) -> None:
    rc, _, err = procs.run("start", "--port", "0", "--data-dir", str(tmp_path / "n"), "--secure")
    assert rc == 1
    assert "no key pair" in err and "zbroker keygen" in err


def test_the_publish_filter_cuts_refused_runs_out_of_a_batch_of_runs() -> None:
    """The permission filter's part for batches of runs (client protocol 3): refused runs
    go, each message counted; a malformed run is left for the publish handler to count;
    a frame with nothing left is dropped (None)."""
    from zbroker.security.publish_filter import _runs_allowed

    refused: list[str] = []

    def refuse(what: str, user: str, topic: str) -> str:
        refused.append(topic)
        return ""

    def may(user: str, topic: str) -> bool:
        return topic.startswith("Y.")

    ok, no = [b"p", 0, None], [b"q", 0, None]
    runs: list[Any] = [["Y.a", [ok]], ["X.b", [no, no, no]], "junk", ["Y.c", [ok, ok]]]
    kept = _runs_allowed(wire.encode_publish_runs(runs), "bob", may, refuse)
    assert kept is not None
    assert msgpack.unpackb(kept) == [["Y.a", [ok]], "junk", ["Y.c", [ok, ok]]]
    assert refused == ["X.b"] * 3
    whole = wire.encode_publish_runs([["Y.a", [ok]]])
    assert _runs_allowed(whole, "bob", may, refuse) is whole  # nothing cut: as it came
    refused.clear()
    assert _runs_allowed(wire.encode_publish_runs([["X.b", []]]), "bob", may, refuse) is None
    assert refused == ["X.b"]  # a refused run is counted even when it holds nothing


@pytest.mark.parametrize("runs", [1, 15, 16, 70_000])
def test_the_publish_filter_knows_a_batch_of_runs_of_any_size(runs: int) -> None:
    """Arrays of 16 or more elements have a longer header: a batch of 16 runs or more
    (or of 16-entry runs) is still one, so no run gets past the permission check."""
    from zbroker.security.publish_filter import _is_runs

    batch = [["X.b", [[b"q", 0, None]] * 20]] * runs
    assert _is_runs(wire.encode_publish_runs(batch))
    assert not _is_runs(
        wire.encode_publish_batch([wire.encode_publish("X.b", b"q", 0, None)] * runs)
    )
    assert not _is_runs(wire.encode_publish("X.b", b"q", 0, None))
    assert not _is_runs(b"") and not _is_runs(b"\x91") and not _is_runs(b"\xdc\x00")
