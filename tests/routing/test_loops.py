"""Unit tests for zbroker.routing.loops: one section per named loop rule."""

from __future__ import annotations

import pytest

from zbroker.routing.loops import is_duplicate_link, is_link_to_self, path_holds, ttl_spent

# -- own ID in path -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "broker_id", "expected"),
    [
        ((), "A", False),
        (("A",), "A", True),
        (("A",), "B", False),
        (("A", "B", "C"), "A", True),  # origin
        (("A", "B", "C"), "B", True),  # middle
        (("A", "B", "C"), "C", True),  # last hop
        (("A", "B", "C"), "D", False),
        (("AB",), "A", False),  # whole IDs, not substrings
        (("A",), "AB", False),
        (["X", "Y"], "Y", True),  # any sequence
    ],
)
def test_path_holds(path: tuple[str, ...], broker_id: str, expected: bool) -> None:
    assert path_holds(path, broker_id) is expected


# -- ttl spent ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hops", "ttl", "expected"),
    [
        (0, 0, False),
        (1, 0, True),
        (1, 1, False),
        (2, 1, True),
        (31, 32, False),
        (32, 32, False),
        (33, 32, True),
    ],
)
def test_ttl_spent(hops: int, ttl: int, expected: bool) -> None:
    assert ttl_spent(hops, ttl) is expected


# -- link to self ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("own", "peer", "expected"),
    [("A", "A", True), ("A", "B", False), ("A", "a", False), ("A", "AA", False)],
)
def test_is_link_to_self(own: str, peer: str, expected: bool) -> None:
    assert is_link_to_self(own, peer) is expected


# -- duplicate link -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "peer", "name", "incarnation", "expected"),
    [
        (None, "B", "l1", 1, False),  # no existing link
        (("B", "l1", 1), "B", "l1", 1, True),  # same incarnation redialling
        (("B", "l1", 1), "B", "l1", 2, True),  # restarted peer
        (("B", "l1", 2), "B", "l1", 1, False),  # an older incarnation never replaces
        (("B", "l1", 1), "C", "l1", 1, False),  # another broker
        (("B", "l1", 1), "B", "l2", 1, False),  # another link name
        (("B", "l1", 1), "C", "l2", 5, False),
    ],
)
def test_is_duplicate_link(
    existing: tuple[str, str, int] | None,
    peer: str,
    name: str,
    incarnation: int,
    expected: bool,
) -> None:
    assert is_duplicate_link(existing, peer, name, incarnation) is expected
