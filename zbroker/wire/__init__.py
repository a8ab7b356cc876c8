"""The wire protocol: every frame zbroker sends, and the codec between frames and values.

One decoder and one encoder per frame family, used by the node, the client, security and
the tests alike; every name is reachable here as ``wire.NAME``:

* :mod:`.frames` — the reference of every frame and field, and the numbers naming them;
* :mod:`.codec` — msgpack under every frame (malformed input becomes ProtocolError);
* :mod:`.publish` — client publish frames and publish batches;
* :mod:`.delivery` — delivery frames and delivery batches;
* :mod:`.control` — control requests and replies;
* :mod:`.link` — link frames: handshake maps, HEARTBEAT, ADVERT, MSGS, BYE;
* :mod:`.forward` — store-and-forward frames: PMSGS and PACK.

The codec touches no socket; every decoder raises :class:`~zbroker.errors.ProtocolError`
for anything malformed, with a short ``reason`` the node uses as a counter key.
"""

from __future__ import annotations

from .codec import array_header
from .control import decode_control, encode_control
from .delivery import (
    decode_delivery,
    decode_delivery_batch,
    decode_delivery_frame,
    encode_delivery_batch,
    encode_delivery_body,
)
from .forward import (
    check_pmsgs_entry,
    check_producer,
    decode_pack,
    decode_pmsgs,
    encode_pmsgs,
    pmsgs_lseq,
)
from .frames import (
    ADVERT,
    BYE,
    DELIVER,
    DELIVERY_BATCH,
    DELIVERY_BATCH_BYTES,
    DURABLE_ACK,
    DURABLE_CLOSE,
    DURABLE_DELETE,
    DURABLE_OPEN,
    ERROR,
    FMT_BYTES,
    FMT_MSGPACK,
    FMTS,
    GAPS,
    HEARTBEAT,
    HELLO,
    LINK_HELLO,
    LINK_REFUSE,
    LINK_TYPES,
    LINK_WELCOME,
    MSGS,
    OPS,
    PACK,
    PEERS,
    PING,
    PMSGS,
    PRODUCER_WINDOW,
    PUBLISH,
    READ,
    ROUTES,
    STAGE,
    STAGE_ABORT,
    STAGE_COMMIT,
    STATE_ANSWER,
    STATE_FETCH,
    STATE_HANDLER,
    STATE_MISSING,
    STATE_QUERY,
    STATE_REMOVE,
    STATE_SET,
    STATUS,
    SYNC_PREFIX,
)
from .link import (
    check_link_map,
    check_link_msg,
    check_msgs,
    decode_advert,
    decode_advert_sticky,
    decode_frame,
    encode_link,
)
from .publish import (
    check_publishes,
    decode_publish,
    encode_publish,
    encode_publish_batch,
    publish_batch_elements,
    publish_elements,
)

__all__ = [
    "ADVERT",
    "BYE",
    "DELIVER",
    "DELIVERY_BATCH",
    "DELIVERY_BATCH_BYTES",
    "DURABLE_ACK",
    "DURABLE_CLOSE",
    "DURABLE_DELETE",
    "DURABLE_OPEN",
    "ERROR",
    "FMTS",
    "FMT_BYTES",
    "FMT_MSGPACK",
    "GAPS",
    "HEARTBEAT",
    "HELLO",
    "LINK_HELLO",
    "LINK_REFUSE",
    "LINK_TYPES",
    "LINK_WELCOME",
    "MSGS",
    "OPS",
    "PACK",
    "PEERS",
    "PING",
    "PMSGS",
    "PRODUCER_WINDOW",
    "PUBLISH",
    "READ",
    "ROUTES",
    "STAGE",
    "STAGE_ABORT",
    "STAGE_COMMIT",
    "STATE_ANSWER",
    "STATE_FETCH",
    "STATE_HANDLER",
    "STATE_MISSING",
    "STATE_QUERY",
    "STATE_REMOVE",
    "STATE_SET",
    "STATUS",
    "SYNC_PREFIX",
    "array_header",
    "check_link_map",
    "check_link_msg",
    "check_msgs",
    "check_pmsgs_entry",
    "check_producer",
    "check_publishes",
    "decode_advert",
    "decode_advert_sticky",
    "decode_control",
    "decode_delivery",
    "decode_delivery_batch",
    "decode_delivery_frame",
    "decode_frame",
    "decode_pack",
    "decode_pmsgs",
    "decode_publish",
    "encode_control",
    "encode_delivery_batch",
    "encode_delivery_body",
    "encode_link",
    "encode_pmsgs",
    "encode_publish",
    "encode_publish_batch",
    "pmsgs_lseq",
    "publish_batch_elements",
    "publish_elements",
]
