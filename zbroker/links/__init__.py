"""Links between nodes: the sans-IO state machine (:mod:`.state`, :mod:`.handshake`,
:mod:`.outbox`) and its I/O (:mod:`.table`, :mod:`.dialer`, :mod:`.acceptor`,
:mod:`.flush`)."""

from .state import Due, Link, LinkKind, LinkState, due, link_key

__all__ = ["Due", "Link", "LinkKind", "LinkState", "due", "link_key"]
