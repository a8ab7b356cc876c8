"""Store-and-forward of persistent messages across links, hop by hop.

:mod:`.queues` (sans-IO) numbers and holds each directed link's queue and each inbound
link's position; :mod:`.dedupe` drops repeats by another path; :mod:`.sticky` keeps the
durable-backed routes through outages and restarts; :mod:`.feature` plugs them into the
node (PMSGS and PACK frames, the pipeline's persistent sends, the pass's flush).
"""

from .dedupe import PersistentDedupe
from .feature import StoreAndForward
from .queues import RETRANSMIT_AFTER, WINDOW, Forwarder, OutQueue

__all__ = [
    "RETRANSMIT_AFTER",
    "WINDOW",
    "Forwarder",
    "OutQueue",
    "PersistentDedupe",
    "StoreAndForward",
]
