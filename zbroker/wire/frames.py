"""The frames of the wire protocol: every frame and field zbroker sends, and their numbers.

This module owns the reference below and the constants that name frames (op and link
type numbers, payload formats, batch bounds, the sync prefix); the encoders and decoders
live one module per frame family beside it (:mod:`.publish`, :mod:`.delivery`,
:mod:`.control`, :mod:`.link`, :mod:`.forward`).

All frames are single ZeroMQ frames (one frame per message on the hot path: in pyzmq each
extra frame of a multipart message costs about as much as a message). Bodies are msgpack.

Client publish (client PUSH → node PULL, ``PORT+1``)::

    [topic: str, payload: bytes, fmt: int, headers: map[str, any] | nil]

``fmt`` says what the payload bytes are: ``0`` raw bytes as the publisher gave them,
``1`` a msgpack-encoded object (the client API accepts any msgpack-able value).

Publish batch (same socket), several publishes in one frame::

    [frame: bin, frame: bin, ...]      each ``frame`` one publish frame as above

An array whose first element is a ``bin`` is a batch (a publish frame starts with its topic,
a ``str``). The node takes each element as if it had arrived alone (an element that is not
a ``bin`` is counted as ``bad_shape``), so a batch changes nothing but the per-frame cost.
A node announces in its HELLO reply (``publish_batch``: bytes) that it reads batches and how
large they may be; a client batches only publishes that come faster than
:data:`~zbroker.const.PUBLISH_LINGER` apart, so a lone publish still leaves at once.

Batch of publish runs (same socket; client protocol 3), consecutive publishes on one topic
sent as one run::

    [[topic: str, [[payload: bytes, fmt: int, headers: map | nil], ...]], ...]

An array whose first element is an array is a batch of runs. The rules are a publish
frame's: a run that is not a 2-element array with a non-empty array of entries second is
counted once as ``bad_shape``; a run whose topic is not a publishable name counts every
entry it holds as ``bad_type`` (not a string) or ``bad_topic``; an entry that is not
a 3-element array counts as ``bad_shape``, one with a wrong type as ``bad_type``, and the
rest of its run is taken. The node decodes the frame once, checks and routes a run's topic once, and
gives each message its sequence in order, so a batch of runs delivers exactly what the same
publishes sent one by one would. A client sends runs only to a node whose HELLO reply says
``client_protocol`` 3 or more (to an older node: publish batches as above).

Delivery (node XPUB → client SUB, ``PORT+2``)::

    pattern-utf8  NUL  msgpack([topic, payload, fmt, headers, origin, incarnation, seq, ts])
        pattern-seq (8 bytes, big-endian)

A delivery frame may also carry several messages of one pattern (a *delivery batch*)::

    pattern-utf8  NUL  msgpack([envelope, envelope, ...])  pattern-seq (8 bytes, big-endian)

where each ``envelope`` is the 8-element array above (messages taken whole: persistent
ones, staged commits, what store-and-forward took). Client publishes and the messages a
node relays (they came by a link, in runs: see MSGR) travel as a *batch of runs*, a lone
one as a batch of one run of one entry::

    pattern-utf8  NUL  msgpack([[topic, origin, incarnation, [entry, entry, ...]], ...])
        pattern-seq (8 bytes, big-endian)

each ``entry`` being ``[payload, fmt, headers, seq, ts]``: a run's messages share its topic,
origin and incarnation, which are sent once (the entries go on as the publish or link
frame brought them, with the sequence and time the first node gave them; a run is split
where a frame ends). A reader tells the forms apart by the decoded array: a topic (str)
first for one message; arrays of 8 elements for a batch, of 4 for a batch of runs (an
empty run, or an entry not of 5 elements, is malformed). The node batches what one drain
pass produced for a pattern (up to :data:`DELIVERY_BATCH` messages or about
:data:`DELIVERY_BATCH_BYTES` of payload; a run relayed whole goes whole, up to what the
link frame that brought it held), so a subscriber pays one receive per batch
under load, and a lone message still leaves at once, alone in its frame (no timer:
batching never delays a message).

The trailer numbers the node's sends on that pattern (1, 2, 3, ...): a subscriber whose
queue overflowed at the node (a slow consumer: the node's XPUB drops for that subscriber
only, never stalling the others) sees a gap, counts it and reports it to the node
(``GAPS``), which counts it in its status. Numbers count messages, not frames: a batch of
``k`` messages takes the numbers ``n - k + 1 .. n`` and carries ``n``, so a dropped batch
shows as a gap of exactly the messages it held.

A *gap notice* has a map for its body, and the pattern's current trailer (it takes no
number)::

    pattern-utf8  NUL  msgpack({gap: {node, link, peer, reason}})  pattern-seq

It tells the subscribers of ``pattern`` that messages may have been lost upstream: a link
died at ``node`` (see ``GAP`` below and :mod:`zbroker.features.gaps`).

The frame begins with the subscription pattern it is delivered for and a NUL byte (which no
pattern contains); clients subscribe to ``pattern + NUL``, so ZeroMQ's prefix filter becomes
an exact match and a client with two overlapping patterns receives one copy per pattern.
``(origin, incarnation, seq)`` is the message ID the origin node assigned; ``ts`` is the
origin node's receive time (float seconds since the epoch).

A subscription with a selector (a boolean expression over the headers,
:mod:`zbroker.selectors`) subscribes to ``pattern SEP selector NUL`` instead
(:data:`SELECTOR_SEP`, a byte no pattern holds, so no plain key is a prefix of it and it is a
prefix of no other key); its delivery frames start with that key and hold only the messages
its selector accepts. A decoder reads ``pattern SEP selector`` where the pattern is.

Subscription sync (client SUB → node XPUB): besides ``pattern + NUL`` a client subscribes to
``SYNC_PREFIX + token``. Subscriptions travel one connection in order, so when the node sees
the sync key every subscription sent before it is active; the node answers by publishing a
frame equal to the key, which only that client receives.

Control (client or peer DEALER → node ROUTER, ``PORT``)::

    request  [op: int, req_id: int, body: map]
    reply    [op: int, req_id: int, body: map]     (op = request op, or ERROR)

=========  =====  ===========================================================
op         value  body
=========  =====  ===========================================================
HELLO      1      request ``{client_protocol}``; reply ``{broker_id, incarnation, version,
                  client_protocol, endpoints, ports: {control, publish, deliver},
                  publish_batch}`` (a request without ``client_protocol`` >= 2 is
                  answered, and the node logs that the client is too old to read
                  delivery runs; a client sends batches of publish runs only to a
                  node whose reply says 3 or more); with security on also ``user``
                  and ``permissions: {publish, subscribe, monitor}`` (its patterns,
                  and whether it may read STATUS, ROUTES and PEERS)
STATUS     2      request ``{}``; reply: the node's status map
PING       3      request ``{}``; reply ``{incarnation}``, and ``unknown: true`` when
                  this connection never said HELLO (a reconnect the client must redo)
GAPS       13     one-way ``{pattern: missed, ...}``: deliveries a subscriber's queue dropped
ROUTES     4      request ``{pattern?: str}``; reply ``{routes: [{pattern, origin, path,
                  hops, link}]}``
PEERS      5      request ``{}``; reply ``{peers: [{id, found_by, state, endpoint, links}]}``
PUBLISH    6      request ``{topic, payload, fmt, headers, producer?, pseq?}``: a
                  persistent publish; the reply ``{id: [origin, incarnation, seq],
                  retained_seq}`` comes after the node's store committed it.
                  ``producer`` (int, 1..2^63-1, random per client) and ``pseq`` (int >= 1,
                  numbering that client's persistent publishes) make it idempotent: a
                  ``(producer, pseq)`` the node took already is not stored again, and
                  is answered ``{id, retained_seq, duplicate: true}`` with the first
                  answer's values (``retained_seq`` null if this node had the message
                  from a link). One older than the node's last
                  :data:`PRODUCER_WINDOW` of that producer gets an ``ERROR`` (it may
                  have been stored: the node cannot tell)
READ       7      request ``{pattern, start, end?, limit}``: the retention log range
                  ``start <= seq < end``; reply ``{rows: [[seq, topic, payload, fmt,
                  headers, origin, incarnation, origin_seq, ts]], first_seq, last_seq,
                  expired_upto, next}`` (at most ``limit`` rows and about 8 MB of topics
                  and payloads, from at most 20,000 rows examined, so a pattern-filtered
                  page may hold fewer rows, or none, and still not be the last;
                  ``next``: where to continue; ``expired_upto``:
                  the highest sequence a rule retaining ``pattern`` lost to its bounds).
                  With ``columns: true`` the reply has ``columns: [[seq...], [topic...],
                  ...]`` (the same nine fields, one array each) instead of ``rows``
DURABLE_OPEN 8    request ``{name, pattern, credit, max_msgs, max_bytes, max_age, overflow?}``:
                  create (if new; bounds: 0 = unbounded; overflow ``drop-oldest``
                  (default) or ``reject-new``) and attach
                  to a durable subscription; reply ``{name, pattern, stored, created,
                  home}`` (home: the node's broker ID). A name a live other node holds
                  is not created: ``ERROR {message, home}`` names that node (a
                  DURABLE_DELETE of such a name gets the same)
DURABLE_ACK 9     one-way ``{name, upto}``: messages with q <= upto are processed
DURABLE_CLOSE 10  one-way ``{name}``: detach (the subscription and its store remain)
DURABLE_DELETE 11 request ``{name}``: delete it and its stored messages; reply
                  ``{deleted, found}`` (found: false when no durable had that name)
DELIVER    12     node to client, req_id 0: ``{name, q, redelivered, msg: [topic,
                  payload, fmt, headers, origin, incarnation, seq, ts]}``; at most
                  ``credit`` unacknowledged at a time
STAGE      14     request ``{token, part, group?, rows: [[topic, payload, fmt, headers], ...]}``:
                  hold chunk ``part`` (0, 1, ...) of a write task's rows under ``token``;
                  reply ``{token, rows}`` (rows held under it so far). Nothing is published.
STAGE_COMMIT 23   request ``{tokens: [[token, rows], ...], writer?, batch?, group?}``:
                  publish the rows of every token (all or none); a ``(writer, batch)``
                  applied before is not applied again. Reply after the store commit:
                  ``{applied: int, duplicate: bool}``. ``group``: then drop the group's
                  other tokens (attempts no commit names)
STAGE_ABORT 24    request ``{tokens: [token, ...], group?}``: drop their rows (and the
                  group's); reply ``{discarded}``
ERROR      15     reply ``{message: str}``
QUEUE_JOIN 30     request ``{group, pattern, member: int, credit}``: this connection's
                  member ``member`` joins queue group ``group`` on ``pattern``; reply
                  ``{group, pattern, members}`` (the node's members of it, this one included)
QUEUE_ACK  31     one-way ``{member, upto}``: deliveries numbered <= upto are processed
                  (frees credit)
QUEUE_LEAVE 32    one-way ``{member}``: the member leaves its group (after its last
                  QUEUE_ACK: what it still holds goes to the other members)
QDELIVER   33     node to client, req_id 0: ``{member, n, msgs: [[topic, payload, fmt,
                  headers, origin, incarnation, seq, ts], ...]}``: the member's deliveries
                  numbered ``n - len(msgs) + 1 .. n`` (1, 2, ... per membership); at most
                  ``credit`` unacknowledged at a time
LEAVING    37     node to client, req_id 0, ``{}``: the node is stopping; the client moves
                  to another node (it drains meanwhile: what was sent to it is taken)
STATE_SET  50     request ``{topic, payload, fmt, headers}``: set a stateful topic's value
                  (see :mod:`zbroker.stateful`); reply after the store commit
                  ``{version, owner}``
STATE_REMOVE 51   request ``{pattern}``: remove the stateful topics it matches, on every
                  node; reply ``{removed: int}``
STATE_FETCH 52    request ``{pattern, snapshot?: bool}``: the current values
                  on every node; reply ``{values: [value...], gone: [[topic, version,
                  owner]...]}`` (``gone``: removals, with ``snapshot``); a value is
                  ``[topic, payload, fmt, headers, version, owner, updated, replica_of]``
STATE_HANDLER 53  request ``{branch, remove?: bool}``: this connection handles missing
                  topics under ``branch``; reply ``{}``
STATE_MISSING 54  node to client, req_id 0: ``{id, pattern, node, branch}`` (a subscribe or
                  fetch of ``pattern`` on ``node`` matched no stateful topic); client to
                  node, one-way: ``{id, verdict: "proceed" | "cancel"}``
=========  =====  ===========================================================

Links (dialing node's DEALER → other node's ROUTER, ``PORT``; the DEALER's routing id is
``broker_id/link_name``). Every link frame is an array whose first element is its type;
types 16 and up, so the ROUTER tells them from control requests by the first element::

    LINK_HELLO    [16, {id, incarnation, group, version, name, duplex, ttl, conduit,
                        include, exclude, static, heartbeat_interval, heartbeat_timeout}]
    LINK_WELCOME  [17, {id, incarnation, group, version}]
    LINK_REFUSE   [18, {reason: str, retry: bool}]
    HEARTBEAT     [19]
    ADVERT        [20, full: bool, [[pattern, origin, path: [str] | nil, sticky?: bool,
                                    selectors?: [str]], ...]]
    MSGS          [21, [[topic, payload, fmt, headers, origin, incarnation, seq, ts,
                         path: [str], targets: [str] | nil], ...]]
    BYE           [22, {reason: str}]
    PMSGS         [25, epoch: int, base: int, [[lseq, topic, payload, fmt, headers, origin,
                         incarnation, seq, ts, path: [str], targets: [str] | nil, pseq,
                         producer?: [producer, pseq]], ...]]
    PACK          [26, epoch: int, upto: int]
    GAP           [27, {node: str, n: int, link: str, peer: str, reason: str, path: [str]}]
    QMSGS         [34, [[topic, payload, fmt, headers, origin, incarnation, seq, ts,
                         path: [str], [target, group key]], ...]]
    QCAP          [35, [[group key, origin, stamp, members, free credit], ...]]
    MSGR          [36, [[topic, origin, incarnation, path: [str], targets: [str] | nil,
                         [[payload, fmt, headers, seq, ts], ...]], ...]]

``QMSGS`` carries messages each meant for ONE member node of a queue group (see
:mod:`zbroker.routing.groups`): a MSGS entry whose last field is ``[target, group key]``;
every node forwards it toward ``target`` alone. ``QCAP`` floods the capacity behind each
group key per origin (a newer ``stamp`` replaces an older one).

    STATE_QUERY   [55, qid: str, kind: str, pattern: str, origin: str(, budget_ms: int)]
    STATE_ANSWER  [56, qid: str, values: [value...], gone: [[topic, version, owner]...],
                   removed: int, last: bool(, cut: true)]
    MISSING_ASK   [57, mid: str, pattern: str, node: str(, path: [str...])]
    MISSING_REPLY [58, mid: str, verdict: "proceed" | "cancel" | "none"]

``STATE_QUERY`` asks a node and, through it, every node behind it (each forwards it once,
to its other links, and answers with what it and they hold once all answered or their links
went down): ``kind`` ``fetch``, ``snapshot`` (the node first waits until it routes
``pattern`` toward ``origin``) or ``remove``; ``budget_ms``: how long the sender still waits
(the receiver answers sooner, with what it has). A query seen before is answered empty
(meshes). An answer too large for one frame comes in several; the last says ``last``, and
``cut`` if a link asked did not answer in time or went down (a replica's sync asks again).

``MISSING_ASK`` goes from a secondary to its primary (a link with ``replicate``): a
subscribe or fetch on ``node`` matched no stateful topic; the primary asks its most
specific handler (and its own primaries) unless it has a topic ``pattern`` matches, and
answers the verdict (``none``: no handler anywhere). ``path`` names the nodes that asked
on the way, the sender last: a node on it answers ``none`` at once (``proceed`` if it
holds a topic the pattern matches, as any primary does), and nobody asks a
primary on it (replicate links that form a cycle would pass the ask round for ever).

``ADVERT`` carries interest entries (``path`` nil withdraws; ``full`` replaces the
receiver's table for this link). An entry with a fourth element ``true`` is *sticky*: it is
backed by a durable subscription, and a receiver keeps it (lowest preference) while the link
it came over is down, so persistent messages are still routed toward it and wait in a
link queue (see :mod:`zbroker.forward`). A fifth element lists the *selectors* behind the
entry (canonical texts, :mod:`zbroker.selectors`): its origin wants only the messages of
the pattern that one of them accepts, so no node sends it others; an entry without one
wants every message. An entry whose selector does not parse here is taken without it.

``MSGS`` batches every message one drain pass found for the link into one frame (a ROUTER
adds an identity frame per send: amortize it), cut by count and by bytes so that no frame
passes what the next node accepts (see ``zbroker.const.LINK_BATCH_BYTES``). ``MSGR`` is the
same messages as *runs* (:mod:`.runs`): consecutive messages of one topic, origin,
incarnation, path and targets carry those fields once, each entry only its own. A node
sends MSGR and takes both; a message's meaning is the same in either. An ``ADVERT``
too long for one frame is sent as several: only the first says ``full``.

``GAP`` says that a link died at ``node`` (its ``n``-th such notice): messages in flight
on it may be lost. Each node that takes it tells its own subscribers and passes it on to
its other links (``path`` lists the nodes it crossed; a node in it, or a notice seen
before, stops there).

``PMSGS`` carries persistent messages store-and-forward: ``epoch`` names the sender's
outbound queue for this link (random, made with the queue), ``lseq`` numbers its entries
(1, 2, ... per queue; the receiver takes them strictly in order), ``base`` is the sender's
oldest entry still held (entries below it that the receiver lacks were dropped by the
queue's bounds: it stops waiting for them), ``pseq`` numbers the origin's persistent
messages (per incarnation; the receiver's persistent dedupe key). The optional 13th
element is the ``[producer, pseq]`` of an idempotent PUBLISH (above): every node that takes
the message records it, so a second copy of the same publish (a client's retry through
another node after a failover) is dropped at any node that took the first. ``PACK`` is the
receiver's cumulative answer, sent after the commit that stored every entry up to ``upto``
of that epoch; the sender then deletes them.
"""

from __future__ import annotations

FMT_BYTES = 0
FMT_MSGPACK = 1
#: every payload format a frame may carry
FMTS = (FMT_BYTES, FMT_MSGPACK)

HELLO = 1
STATUS = 2
PING = 3
ROUTES = 4
PEERS = 5
PUBLISH = 6
READ = 7
DURABLE_OPEN = 8
DURABLE_ACK = 9
DURABLE_CLOSE = 10
DURABLE_DELETE = 11
DELIVER = 12
GAPS = 13
STAGE = 14
ERROR = 15
STAGE_COMMIT = 23
STAGE_ABORT = 24
QUEUE_JOIN = 30
QUEUE_ACK = 31
QUEUE_LEAVE = 32
QDELIVER = 33
LEAVING = 37  # node -> client, unasked: it is stopping, move (zbroker/node/drain.py)
OPS = {
    HELLO: "HELLO", STATUS: "STATUS", PING: "PING", ROUTES: "ROUTES", PEERS: "PEERS",
    PUBLISH: "PUBLISH", READ: "READ", DURABLE_OPEN: "DURABLE_OPEN", DURABLE_ACK: "DURABLE_ACK",
    DURABLE_CLOSE: "DURABLE_CLOSE", DURABLE_DELETE: "DURABLE_DELETE", DELIVER: "DELIVER",
    GAPS: "GAPS", STAGE: "STAGE", STAGE_COMMIT: "STAGE_COMMIT", STAGE_ABORT: "STAGE_ABORT",
    ERROR: "ERROR", QUEUE_JOIN: "QUEUE_JOIN", QUEUE_ACK: "QUEUE_ACK",
    QUEUE_LEAVE: "QUEUE_LEAVE", QDELIVER: "QDELIVER", LEAVING: "LEAVING",
}  # fmt: skip

LINK_HELLO = 16
LINK_WELCOME = 17
LINK_REFUSE = 18
HEARTBEAT = 19
ADVERT = 20
MSGS = 21
BYE = 22
# 23 and 24 are control ops (STAGE_COMMIT, STAGE_ABORT): link types continue at 25
PMSGS = 25
PACK = 26
GAP = 27
# 30-33 are control ops (QUEUE_*, QDELIVER), and 37 (LEAVING)
QMSGS = 34
QCAP = 35
MSGR = 36
LINK_TYPES = frozenset(
    {
        LINK_HELLO, LINK_WELCOME, LINK_REFUSE, HEARTBEAT, ADVERT, MSGS, BYE, PMSGS, PACK, GAP,
        QMSGS, QCAP, MSGR,
    }
)  # fmt: skip

#: messages per delivery batch frame at most (see "Delivery" above)
DELIVERY_BATCH = 256
#: payload bytes after which a delivery batch is cut (a frame stays well below a MB or so
#: unless one message alone is larger)
DELIVERY_BATCH_BYTES = 64 * 1024

#: Between the pattern and the selector in the XPUB key of a subscription with a selector
#: (``pattern SEP selector NUL``; see "Delivery" above). No pattern contains it.
SELECTOR_SEP = "\x01"

#: First byte of a subscription-sync key. Not a valid pattern character, so it never
#: collides with a real subscription.
SYNC_PREFIX = b"\x02"


#: sequences of a producer a node remembers (see PUBLISH above); a client keeps its
#: unconfirmed persistent publishes within this span of sequences
PRODUCER_WINDOW = 1000

#: bounds of numbers that reach SQLite (INTEGER is signed 64-bit; ts must be finite)
I64 = 1 << 63
TS_MAX = 1e15
#: (reason, detail) of each element a batch check refused
Errors = list[tuple[str, str]]

# topics with state (:mod:`zbroker.stateful`): control ops 50-54, link types 55-59
STATE_SET = 50
STATE_REMOVE = 51
STATE_FETCH = 52
STATE_HANDLER = 53
STATE_MISSING = 54
STATE_QUERY = 55
STATE_ANSWER = 56
MISSING_ASK = 57
MISSING_REPLY = 58
OPS.update(
    {
        STATE_SET: "STATE_SET",
        STATE_REMOVE: "STATE_REMOVE",
        STATE_FETCH: "STATE_FETCH",
        STATE_HANDLER: "STATE_HANDLER",
        STATE_MISSING: "STATE_MISSING",
    }
)
LINK_TYPES = LINK_TYPES | {STATE_QUERY, STATE_ANSWER, MISSING_ASK, MISSING_REPLY}
