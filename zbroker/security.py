"""CurveZMQ security: key files, the node allowlist, client permissions, the ZAP handler.

Off by default (plain mode, for a trusted LAN). When a node's config enables it:

* every socket that crosses a network is a CURVE socket: the node's control ROUTER,
  publish PULL and deliver XPUB are CURVE servers with the node's key pair; each link
  DEALER is a CURVE client that authenticates the peer it dials by that peer's public key
  (from the allowlist) and presents the node's own key;
* a connecting key is authenticated by the node's ZAP handler (:class:`Security`, polled
  by the node's own loop: no extra thread, nothing shared between nodes in one process,
  because each node has its own ``zmq.Context`` and so its own ZAP endpoint). The
  handler maps the key to a *user id*: ``node:BROKER_ID`` for a key of the allowlist,
  ``client:NAME`` for a client key; any other key is refused, logged with the peer
  address and counted (``auth_failures``). ZeroMQ stamps the user id on every frame of
  that connection (``frame.get("User-Id")``);
* a link handshake is accepted only from a ``node:`` user whose ID is the one the HELLO
  claims (a node cannot claim another node's ID), and every later frame on that link
  must come from the same user;
* clients publish and subscribe only where their permissions allow (``publish`` and
  ``subscribe`` pattern lists). The node tells a client its permissions in the HELLO
  reply, so the client library refuses locally with a clear
  :class:`~zbroker.errors.PermissionDenied`; a client that sends anyway is refused by the
  node (nothing published, nothing delivered; counted and logged).

Key files are ZeroMQ certificates (``zmq.auth.create_certificates``): ``NAME.key`` holds
the public key, ``NAME.key_secret`` both keys. The allowlist is a directory of public
certificates named ``BROKER_ID.key`` (the file name binds the key to the ID), or a text
file of ``BROKER_ID PUBLIC_KEY`` lines. The client permissions are a TOML file (or the
``[security.clients]`` table of the node config)::

    [alice]
    key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"   # or key_file = "alice.key"
    publish = ["ORDERS.>"]
    subscribe = ["PRICE.>", "ORDERS.*.FILLED"]
"""

from __future__ import annotations

import logging
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zmq
import zmq.auth
import zmq.backend
from zmq.utils import z85

from .errors import ConfigError, InvalidTopic
from .topics import match, validate_pattern

__all__ = [
    "NODE_KEY_NAME",
    "ClientRule",
    "Security",
    "covers",
    "generate_keys",
    "load_allowlist",
    "load_clients",
    "load_key_pair",
    "read_public_key",
]

log = logging.getLogger("zbroker.security")

#: the node's key pair in its key directory: ``node.key`` and ``node.key_secret``
NODE_KEY_NAME = "node"
ZAP_DOMAIN = b"zbroker"
_ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_ZAP_VERSION = b"1.0"
_CACHE_MAX = 10_000
_LOG_INTERVAL = 10.0


# -- keys ----------------------------------------------------------------------------------


def generate_keys(directory: Path, name: str = NODE_KEY_NAME) -> tuple[Path, bool]:
    """Create ``NAME.key``/``NAME.key_secret`` in ``directory`` unless they exist.

    Returns (secret file, created). The secret file is readable by its owner only."""
    secret = directory / f"{name}.key_secret"
    public = directory / f"{name}.key"
    if secret.exists():
        load_key_pair(secret)  # an unreadable existing pair is an error, never overwritten
        return secret, False
    if public.exists():
        raise ConfigError(f"{public} exists without {secret.name}: refusing to overwrite it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _, sec_file = zmq.auth.create_certificates(directory, name)
        Path(sec_file).chmod(0o600)
    except OSError as exc:
        raise ConfigError(f"cannot write keys in {directory}: {exc}") from exc
    return Path(sec_file), True


def load_key_pair(path: str | Path) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a secret certificate, or from a key directory (its
    ``node.key_secret``), or from a 40-character Z85 secret key given as text."""
    text = str(path)
    if len(text) == 40 and not Path(text).exists() and _is_z85(text):
        secret = text.encode()
        return zmq.curve_public(secret), secret
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / f"{NODE_KEY_NAME}.key_secret"
    if not p.exists():
        raise ConfigError(
            f"security is on but there is no key pair at {p}: create it with `zbroker keygen "
            f"--data-dir {p.parent}` (or `--out DIR --name NAME` for a client)"
        )
    try:
        pub, sec = zmq.auth.load_certificate(p)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load a secret key from {p}: {exc} (create one with `zbroker keygen`)"
        ) from exc
    if not pub or not sec:
        raise ConfigError(f"{p} holds no secret key (it is a public certificate)")
    return pub, sec


def read_public_key(value: str | Path) -> bytes:
    """A public key: 40-character Z85 text, or the path of a certificate holding one."""
    text = str(value).strip()
    if len(text) == 40 and _is_z85(text) and not Path(text).exists():
        return text.encode()
    try:
        public, _ = zmq.auth.load_certificate(Path(text).expanduser())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{text!r} is neither a 40-character Z85 public key nor a readable key file: {exc}"
        ) from exc
    if not public:
        raise ConfigError(f"{text}: no public key in it")
    return public


def _is_z85(text: str) -> bool:
    try:
        return len(z85.decode(text.encode())) == 32
    except (ValueError, KeyError, UnicodeError):
        return False


def load_allowlist(path: Path) -> dict[str, bytes]:
    """Broker ID -> Z85 public key, from a directory of ``ID.key`` certificates or a file
    of ``ID KEY`` lines (``#`` starts a comment at the start of a line or after the key)."""
    from .config import validate_broker_id

    out: dict[str, bytes] = {}
    keys_seen: dict[bytes, str] = {}

    def add(broker_id: str, key: bytes, where: str) -> None:
        validate_broker_id(broker_id, where)
        if broker_id in out:
            raise ConfigError(f"{where}: broker ID {broker_id!r} is listed twice")
        if key in keys_seen:
            raise ConfigError(
                f"{where}: the key of {broker_id!r} is also {keys_seen[key]!r}'s: one key, one ID"
            )
        out[broker_id] = key
        keys_seen[key] = broker_id

    if path.is_dir():
        try:
            files = sorted(path.glob("*.key"))
        except OSError as exc:
            raise ConfigError(f"allowlist {path}: cannot list it: {exc.strerror}") from exc
        for f in files:
            try:
                public, _ = zmq.auth.load_certificate(f)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"allowlist {f}: not a public key certificate: {exc}") from exc
            add(f.stem, public, f"allowlist {f}")
        return out
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"allowlist {path}: cannot read it: {exc}") from exc
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) > 2 and parts[2].startswith("#"):
            parts = parts[:2]  # a trailing comment ('#' is also a Z85 digit: not inside)
        if len(parts) != 2 or not _is_z85(parts[1]):
            raise ConfigError(
                f"allowlist {path} line {n}: expected 'BROKER_ID PUBLIC_KEY' (40-character Z85)"
            )
        add(parts[0], parts[1].encode(), f"allowlist {path} line {n}")
    return out


@dataclass(frozen=True, slots=True)
class ClientRule:
    """One client key's permissions: topic patterns it may publish to / subscribe to."""

    name: str
    key: bytes
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def load_clients(source: Path | dict[str, Any], base: Path | None = None) -> dict[str, ClientRule]:
    """Client rules from a TOML file or an already parsed table (``{name: {key | key_file,
    publish, subscribe}}``)."""
    from .config import validate_broker_id

    where = str(source) if isinstance(source, Path) else "[security.clients]"
    if isinstance(source, Path):
        try:
            data: Any = tomllib.loads(source.read_text("utf-8"))
        except (OSError, UnicodeError) as exc:
            raise ConfigError(f"client permissions {source}: cannot read it: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"client permissions {source}: not valid TOML: {exc}") from exc
        base = source.parent
    else:
        data = source
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a table of clients")
    rules: dict[str, ClientRule] = {}
    keys: dict[bytes, str] = {}
    for name, entry in data.items():
        w = f"{where}: client {name!r}"
        validate_broker_id(name, f"{where}: client name")
        if not isinstance(entry, dict):
            raise ConfigError(f"{w} must be a table")
        unknown = set(entry) - {"key", "key_file", "publish", "subscribe"}
        if unknown:
            raise ConfigError(f"{w}: unknown key(s) {', '.join(sorted(unknown))}")
        if ("key" in entry) == ("key_file" in entry):
            raise ConfigError(f"{w}: give exactly one of key (Z85 text) or key_file (a path)")
        if "key" in entry:
            if not isinstance(entry["key"], str) or not _is_z85(entry["key"]):
                raise ConfigError(f"{w}: key must be a 40-character Z85 public key")
            key = entry["key"].encode()
        else:
            kf = Path(str(entry["key_file"])).expanduser()
            if not kf.is_absolute() and base is not None:
                kf = base / kf
            key = read_public_key(kf)
        if key in keys:
            raise ConfigError(f"{w}: same key as client {keys[key]!r}")
        keys[key] = name
        perms: dict[str, tuple[str, ...]] = {}
        for kind in ("publish", "subscribe"):
            value = entry.get(kind, [])
            if not isinstance(value, list):
                raise ConfigError(f"{w}: {kind} must be a list of patterns")
            try:
                perms[kind] = tuple(validate_pattern(p) for p in value)
            except InvalidTopic as exc:
                raise ConfigError(f"{w}: {kind}: {exc}") from exc
        rules[name] = ClientRule(name, key, perms["publish"], perms["subscribe"])
    return rules


def covers(allowed: str, pattern: str) -> bool:
    """True if every topic matching ``pattern`` also matches ``allowed`` (both valid)."""
    a = allowed.split(".")
    p = pattern.split(".")
    for i, seg in enumerate(a):
        if seg == ">":
            return len(p) > i
        if i >= len(p) or p[i] == ">":
            return False
        if seg != "*" and (p[i] == "*" or p[i] != seg):
            return False
    return len(a) == len(p)


# -- the node's runtime side ---------------------------------------------------------------


class Security:
    """A node's keys, allowlist and client rules, and its ZAP handler (node thread only)."""

    def __init__(
        self,
        key_file: Path,
        allowlist: Path | None,
        clients: Path | dict[str, Any] | None,
    ) -> None:
        self.public_key, self.secret_key = load_key_pair(key_file)
        self.nodes = load_allowlist(allowlist) if allowlist is not None else {}
        self.clients = load_clients(clients) if clients is not None else {}
        self._users: dict[bytes, str] = {}  # z85 key -> user id
        for broker_id, key in self.nodes.items():
            self._users[key] = "node:" + broker_id
        for name, rule in self.clients.items():
            if rule.key in self._users:
                raise ConfigError(
                    f"client {name!r} uses the key of {self._users[rule.key]!r}: a key is "
                    "either a node's or a client's"
                )
            self._users[rule.key] = "client:" + name
        self._rules = {"client:" + n: r for n, r in self.clients.items()}
        self._pub_ok: dict[tuple[str, str], bool] = {}
        self._sub_ok: dict[tuple[str, str], bool] = {}
        self.auth_failures = 0
        #: handshakes that failed before authentication (not CURVE, wrong server key)
        self.handshake_failures: dict[str, int] = {}
        self.monitors: list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]] = []
        self.refused: dict[str, int] = {}
        self._last_log: dict[tuple[str, str], float] = {}
        self.zap: zmq.Socket[bytes] | None = None
        #: user id of the control frame being handled (set by :meth:`recv_control`)
        self.user = ""
        #: approved subscriptions on the deliver socket: pattern -> {user: count}
        self.sub_counts: dict[str, dict[str, int]] = {}

    # sockets

    def bind_zap(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        """Bind the ZAP handler (before any CURVE server binds: without a handler,
        libzmq would let every key in)."""
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(_ZAP_ENDPOINT)
        self.zap = sock
        return sock

    def serve(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE server that needs our ZAP handler's approval."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)

    def dial(self, sock: zmq.Socket[bytes], peer: str | None) -> str | None:
        """Make ``sock`` a CURVE client of node ``peer``; returns a problem or None."""
        if peer is None:
            return 'security is on: the link needs the peer\'s broker ID (peer = "ID")'
        key = self.nodes.get(peer)
        if key is None:
            return f"peer {peer!r} is not in the allowlist: its public key is unknown"
        sock.setsockopt(zmq.CURVE_SERVERKEY, key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)
        return None

    def watch(self, sock: zmq.Socket[bytes]) -> zmq.Socket[bytes]:
        """A monitor of ``sock``'s failed handshakes, for the node's poller. (Failures of
        authentication itself are the ZAP handler's to count: it knows the address.)"""
        mon = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        )
        self.monitors.append((sock, mon))
        return mon

    def on_monitor(self, mon: zmq.Socket[bytes]) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                return
            info: dict[str, Any] = dict(event)
            value = info.get("value")
            if info.get("event") == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                # e.g. a plain peer that sent its greeting and hung up (value: an errno)
                reason = "handshake broke off (not CURVE, or the peer left)"
            else:
                reason = _HANDSHAKE_REASONS.get(int(value or 0), f"protocol error {value}")
            self.handshake_failures[reason] = self.handshake_failures.get(reason, 0) + 1
            endpoint = info.get("endpoint", b"")
            where = endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)
            # libzmq names only our endpoint here, not the peer's address
            self._warn(where, reason, "handshake failed on %s: %s", where, reason)

    def close(self) -> None:
        for sock, mon in self.monitors:
            if not sock.closed:
                sock.disable_monitor()
            mon.close(linger=0)
        self.monitors = []
        if self.zap is not None:
            self.zap.close(linger=0)
            self.zap = None

    # the ZAP handler

    def on_zap(self) -> None:
        """Answer every waiting ZAP request (RFC 27): known key -> 200 with its user id."""
        sock = self.zap
        assert sock is not None
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) < 8 or frames[1] != b"":
                continue  # not a ZAP request: libzmq never sends one
            ident, _, version, request_id, domain, address, _identity, mechanism = frames[:8]
            creds = frames[8:]
            user = ""
            why = ""
            if version != _ZAP_VERSION:
                why = "bad ZAP version"
            elif mechanism != b"CURVE" or len(creds) != 1 or len(creds[0]) != 32:
                why = f"mechanism {mechanism.decode('ascii', 'replace')} (CURVE required)"
            else:
                key = z85.encode(creds[0])
                user = self._users.get(key, "")
                if not user:
                    why = f"unknown key {key.decode()}"
            if user:
                reply = [ident, b"", _ZAP_VERSION, request_id, b"200", b"OK", user.encode(), b""]
            else:
                self.auth_failures += 1
                peer = address.decode("utf-8", "replace")
                self._warn(
                    peer,
                    why,
                    "authentication failed from %s (domain %s): %s",
                    peer,
                    domain.decode("utf-8", "replace"),
                    why,
                )
                reply = [ident, b"", _ZAP_VERSION, request_id, b"400", why.encode()[:255], b"", b""]
            try:
                sock.send_multipart(reply, zmq.NOBLOCK)
            except zmq.ZMQError:
                pass

    def _warn(self, source: str, reason: str, fmt: str, *args: Any) -> None:
        """Log at most once per (source, reason) per interval: a flood cannot flood the log."""
        now = time.monotonic()
        k = (source, reason)
        last = self._last_log.get(k)
        if last is not None and now - last < _LOG_INTERVAL:
            return
        if len(self._last_log) > _CACHE_MAX:
            self._last_log.clear()
        self._last_log[k] = now
        log.warning(fmt, *args)

    # who sent it

    def recv_control(self, sock: zmq.Socket[bytes], flags: int) -> list[bytes]:
        """``recv_multipart`` for the control ROUTER that also notes the sender's user id."""
        frames = sock.recv_multipart(flags, copy=False)
        try:
            self.user = str(frames[-1].get("User-Id"))
        except zmq.ZMQError:
            self.user = ""
        return [f.bytes for f in frames]

    def node_user(self, broker_id: str) -> str:
        return "node:" + broker_id

    # permissions

    def permissions(self, user: str) -> dict[str, list[str]] | None:
        rule = self._rules.get(user)
        if rule is None:
            return None
        return {"publish": list(rule.publish), "subscribe": list(rule.subscribe)}

    def may_publish(self, user: str, topic: str) -> bool:
        k = (user, topic)
        ok = self._pub_ok.get(k)
        if ok is None:
            rule = self._rules.get(user)
            ok = rule is not None and any(match(p, topic) for p in rule.publish)
            if len(self._pub_ok) >= _CACHE_MAX:
                self._pub_ok.clear()
            self._pub_ok[k] = ok
        return ok

    def may_subscribe(self, user: str, pattern: str) -> bool:
        k = (user, pattern)
        ok = self._sub_ok.get(k)
        if ok is None:
            rule = self._rules.get(user)
            ok = rule is not None and any(covers(p, pattern) for p in rule.subscribe)
            if len(self._sub_ok) >= _CACHE_MAX:
                self._sub_ok.clear()
            self._sub_ok[k] = ok
        return ok

    def refuse(self, kind: str, user: str, what: str) -> str:
        """Count and log a refused operation; return the message for the client."""
        counter = kind.split()[0]  # "publish", "subscribe", "link", "send"
        self.refused[counter] = self.refused.get(counter, 0) + 1
        who = user or "an unidentified sender"
        message = f"permission denied: {who} may not {kind} {what!r}"
        self._warn(user, kind, "refused: %s", message)
        return message

    def publish_recv(self, sock: zmq.Socket[bytes]) -> Callable[[int], bytes]:
        """A ``recv(flags)`` for the publish PULL that drops (and counts) frames whose
        sender may not publish to their topic, and returns the others as bytes. The node's
        publish handler uses it in place of ``sock.recv`` when security is on, so the
        plain-mode hot path is untouched. When every client may publish everywhere there
        is nothing to refuse, and the socket's own ``recv`` is returned."""
        if all(">" in rule.publish for rule in self.clients.values()):
            return sock.recv
        recv = zmq.backend.Socket.recv.__get__(sock)  # skips pyzmq's Python wrapper
        # user -> {topic bytes as framed: allowed?}: one dict lookup per message
        decided: dict[str, dict[bytes, bool]] = {}
        refuse = self.refuse
        may_publish = self.may_publish

        def allowed(user: str, data: bytes) -> bool | None:
            """May ``user`` publish this publish frame? None: not a publish frame."""
            # the usual frame: fixarray(4), then the topic as fixstr or str8
            key = None
            if len(data) > 2 and data[0] == 0x94:
                b = data[1]
                if 0xA0 <= b <= 0xBF:
                    key = data[2 : 2 + b - 0xA0]
                elif b == 0xD9:
                    key = data[3 : 3 + data[2]]
            known = decided.get(user)
            if known is None:
                if len(decided) >= _CACHE_MAX:
                    decided.clear()
                known = decided[user] = {}
            ok = known.get(key) if key is not None else None
            if ok is None:
                topic = _publish_topic(data)
                if topic is None:
                    return None
                ok = may_publish(user, topic)
                if key is not None:
                    if len(known) >= _CACHE_MAX:
                        known.clear()
                    known[key] = ok
                if not ok:
                    refuse("publish to", user, topic)
            elif not ok:
                refuse("publish to", user, key.decode("utf-8", "replace") if key else "?")
            return ok

        def secure_recv(flags: int) -> bytes:
            while True:
                frame = recv(flags, False)
                data: bytes = frame.bytes
                try:
                    user = str(frame.get("User-Id"))
                except zmq.ZMQError:
                    user = ""
                ok = allowed(user, data)
                if ok:
                    return data
                if ok is False:
                    continue
                batch = _publish_batch(data)
                if batch is None:
                    return data  # malformed: the publish handler rejects and counts it
                # a publish batch: every element is checked; refused ones are dropped
                keep = [e for e in batch if allowed(user, e) is not False]
                if len(keep) == len(batch):
                    return data
                if keep:
                    return bytes(msgpack.packb(keep))

        return secure_recv

    def status(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "public_key": self.public_key.decode(),
            "allowlisted_nodes": sorted(self.nodes),
            "clients": sorted(self.clients),
            "auth_failures": self.auth_failures,
            "handshake_failures": dict(sorted(self.handshake_failures.items())),
            "refused": dict(sorted(self.refused.items())),
        }


_HANDSHAKE_REASONS: dict[int, str] = {
    int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH): "not CURVE (a plain client or node?)",
    int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC): "CURVE handshake failed (wrong server key?)",
}


def _publish_batch(frame: bytes) -> list[bytes] | None:
    """The elements of a publish batch frame (``[publish frame: bin, ...]``), or None."""
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(value) is list and value and all(type(e) is bytes for e in value):
        return value
    return None


def _publish_topic(frame: bytes) -> str | None:
    """The topic of a publish frame, or None when it is not a well-formed one (cheap
    path for the usual encoding: fixarray(4) then a str8/fixstr topic)."""
    if len(frame) > 2 and frame[0] == 0x94:
        b = frame[1]
        if 0xA0 <= b <= 0xBF:
            n = b - 0xA0
            raw = frame[2 : 2 + n]
        elif b == 0xD9:
            n = frame[2]
            raw = frame[3 : 3 + n]
        else:
            raw = None
        if raw is not None and len(raw) == n:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
    try:
        value = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:
        return None
    if type(value) is list and value and type(value[0]) is str:
        return str(value[0])
    return None
