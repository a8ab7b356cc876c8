"""Defaults and tunables, each with its unit and the reason for its value.

Runtime settings are frozen config objects (:mod:`zbroker.config`) built from these; nothing
else in the package hard-codes a number that a user might want to change.
"""

from __future__ import annotations

#: Well-known port (ROUTER: control requests and peer links). PORT+1 takes client publishes,
#: PORT+2 delivers to subscribers.
DEFAULT_PORT = 7100
#: Loopback by default: a node reachable from the network is a decision the user makes
#: (``--host 0.0.0.0``), not an accident of running ``zbroker start``.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_BROKER = f"tcp://{DEFAULT_HOST}:{DEFAULT_PORT}"

#: 2: link messages travel as runs (MSGR); a node of version 1 does not read them, so the
#: handshake refuses a peer of another version rather than lose its messages. 3: an ADVERT
#: entry may say it is held for a link that is down (its sixth field), which a node of
#: version 2 refuses as a malformed advertisement
PROTOCOL_VERSION = 3

#: the client protocol. 2: the client reads delivery frames of runs, which a node of this
#: release sends for publishes and relayed messages; 3: the node reads batches of publish
#: runs (:data:`PUBLISH_RUNS`). A client says its number in HELLO (``client_protocol``) and
#: the node says its own in the reply: a client sends publish runs only to a node of 3 or
#: more, and a node warns about a client below :data:`CLIENT_READS_RUNS` (it would drop
#: those frames)
CLIENT_PROTOCOL = 3
#: the lowest client protocol that reads every delivery frame a node of this release sends
CLIENT_READS_RUNS = 2
#: the lowest client protocol of a node that reads batches of publish runs
PUBLISH_RUNS = 3

#: bytes. Frames larger than this from a client or peer are counted and dropped.
DEFAULT_MAX_FRAME_BYTES = 1024 * 1024
#: bytes of UTF-8 in a topic name or pattern.
MAX_TOPIC_BYTES = 512
#: segments in a topic name or pattern.
MAX_TOPIC_SEGMENTS = 32

#: messages. Send/receive high-water marks on data sockets: deep enough to absorb bursts
#: of 100-byte messages at several hundred thousand per second.
DEFAULT_HWM = 100_000

#: messages drained from one socket per poll pass before the loop looks at the others, so
#: a flood on one socket cannot starve control requests.
DRAIN_BATCH = 2048

#: entries in the subscription trie's literal-topic match cache.
MATCH_CACHE_SIZE = 4096
#: entries in the node's cache of topics already validated.
TOPIC_CACHE_SIZE = 16_384

#: seconds. Rate limit of "bad input" log lines, per source and reason.
BAD_INPUT_LOG_INTERVAL = 60.0

#: milliseconds. Linger on close: long enough to flush a goodbye, short enough never to hang.
CLOSE_LINGER_MS = 200
#: seconds. How long Broker.start() waits for the node thread to bind.
START_TIMEOUT = 10.0
#: seconds. How long Broker.stop() waits for the node thread to finish.
STOP_TIMEOUT = 5.0

#: seconds. Default time a client waits for a node's answer (HELLO, subscribe, status).
DEFAULT_CLIENT_TIMEOUT = 5.0
#: seconds. Default time publish() waits for room in the send queue before PublishTimeout.
DEFAULT_PUBLISH_TIMEOUT = 5.0

#: messages a queue-group member or shared-durable consumer may hold unacknowledged,
#: unless it says otherwise (``Client.subscribe(credit=...)``, ``zbroker sub --credit``)
DEFAULT_CREDIT = 100

#: Topics under this prefix belong to the node.
RESERVED_PREFIX = "$ZB"
#: The branches of it that only nodes subscribe to: their interest keys *are* the queue
#: groups (routing/keys.py), durable homes (routing/durable_homes.py) and topic hosts
#: (routing/hosts.py), and their topics carry shared durables' traffic
#: (features/durables/remote.py). A client subscription there would pass for one of
#: them, so clients may not subscribe there (topics.validate_subscription).
INTERNAL_PREFIXES = ("$ZB.Q.", "$ZB.DURABLE.", "$ZB.SD.", "$ZB.HOST.")
#: their second segments: a topic there matches only patterns that name it (no wildcard
#: in the second segment), as a ``$ZB`` topic matches no leading wildcard
INTERNAL_BRANCHES = frozenset(p.split(".")[1] for p in INTERNAL_PREFIXES)

#: seconds. Links send a heartbeat this often...
DEFAULT_HEARTBEAT_INTERVAL = 1.0
#: seconds. ...and declare the link down after this long without any frame from the peer.
#: Three missed heartbeats: one lost to a GC pause or a busy core is not an outage.
DEFAULT_HEARTBEAT_TIMEOUT = 3.0

#: heartbeat timeouts. A link silent for its heartbeat timeout is down unless frames wait
#: unread where its own may be (we are behind, not the peer); silent this many times as
#: long, it is down whatever waits: the node's ROUTER, shared with clients and every
#: accepted link, may always have input (a flood, or junk) without any being this peer's.
SILENT_GRACE = 2.0
#: seconds. First redial delay after a link fails; doubles (multiplier) up to the maximum.
DEFAULT_RECONNECT_INITIAL = 0.5
DEFAULT_RECONNECT_MAX = 15.0
DEFAULT_RECONNECT_MULTIPLIER = 2.0
#: messages per MSGR frame on a link (one drain pass rarely finds more).
LINK_BATCH = 512
#: bytes of payload per link frame (MSGR, PMSGS) and of entries per ADVERT frame, at most
#: (or the configured max_frame_bytes, if smaller): a frame is cut before the message that
#: would pass it, so large messages travel a few per frame (or alone), never in frames
#: the next node would refuse.
LINK_BATCH_BYTES = 256 * 1024
#: bytes a link frame may exceed max_frame_bytes by: one message that its publisher was
#: allowed to send (a publish frame up to max_frame_bytes) must fit in a link frame with
#: its path, targets and IDs.
LINK_FRAME_SLACK = 64 * 1024
#: seconds. Granularity of the node's timers (heartbeats, liveness, redial).
TICK_INTERVAL = 0.05
#: seconds. A client pings its node this often, and fails over to another after this long
#: without an answer: 1.5 s keeps failover within 2 s of a node dying, and three missed
#: pings are not a hiccup.
DEFAULT_CLIENT_HEARTBEAT_INTERVAL = 0.5
DEFAULT_CLIENT_HEARTBEAT_TIMEOUT = 1.5
#: milliseconds. The node's control socket has libzmq's ZMTP heartbeat: it pings every
#: connection this often and closes one that sent nothing for CONTROL_HEARTBEAT_TIMEOUT_MS
#: after a ping. A connection gone silent without closing (its host lost, a partition)
#: would otherwise stay as long as TCP takes to give up (many minutes), and with it a
#: queue member or durable consumer and what it holds; closed, it is found gone by the
#: node's probes (ROUTER_MANDATORY, every second). The peer's libzmq answers from its own
#: I/O thread, so a client whose callbacks hold its thread still answers, as long as its
#: libzmq reads (one whose receive queue on this connection is full does not). Links that
#: other nodes dial arrive here too and answer the same way. The values are the links'
#: own (1 s, three missed): closed 3 to 4 s after going silent, gone within a second more.
CONTROL_HEARTBEAT_IVL_MS = 1000
CONTROL_HEARTBEAT_TIMEOUT_MS = 3000

#: messages. A client sends at most this many publishes in one publish batch frame...
PUBLISH_BATCH = 64
#: ...and at most this many bytes (or the node's own limit, from its HELLO, if smaller).
PUBLISH_BATCH_BYTES = 64 * 1024
#: seconds. A publish that comes within this time of the client's previous send joins a
#: batch instead of going out alone; a batch leaves when full, when a publish finds it this
#: old, or (the tail of a burst) from the client thread once this old. A publish that
#: comes alone never waits; one that joins a batch nobody fills waits about this long.
PUBLISH_LINGER = 0.0001
#: milliseconds. While a flood keeps the publishing thread sending batches itself, the
#: client thread looks for a tail at most this seldom (doubling from 1 ms): each look takes
#: the GIL from the publishing thread, and a flood's batches do not need it. A burst's last
#: batch therefore waits up to this long after a flood (about 1 ms before; a lone batch
#: still leaves after the linger).
PUBLISH_TAIL_POLL_MS = 4

#: a node told to stop serves on while its clients move away (they heard LEAVING): until
#: no publish came from a client for DRAIN_QUIET seconds, DRAIN_MAX at most
#: (zbroker/node/kernel.py). Within Broker.stop's STOP_TIMEOUT.
DRAIN_QUIET = 0.05
DRAIN_MAX = 1.0
