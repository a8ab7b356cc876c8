"""What the tests of :class:`zbroker.sublist.Sublist` (``tests/test_sublist*.py``) share:
the ``cached`` and ``make`` fixtures (every such test runs with the match cache on and
off), the check that a trie is empty, and Hypothesis strategies of patterns and items."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import strategies as st

from zbroker.sublist import Sublist

MakeSublist = Callable[[], Sublist[str]]


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def cached(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def make(cached: bool) -> MakeSublist:
    def factory() -> Sublist[str]:
        return Sublist() if cached else Sublist(cache_size=0)

    return factory


def assert_empty_trie(sl: Sublist[str]) -> None:
    """Nothing left in ``sl``: no pattern, no item, no node below the root."""
    root = sl._root
    assert root.literal == {}
    assert root.star is None
    assert root.gt == {}
    assert root.items == {}
    assert root.empty()
    assert list(sl.patterns()) == []
    assert len(sl) == 0


_PATTERN_SEGMENT = st.sampled_from(["A", "B", "C", "*"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    segs = draw(st.lists(_PATTERN_SEGMENT, min_size=0, max_size=4))
    if not segs or draw(st.booleans()):
        segs.append(">")
    return ".".join(segs)


ITEM = st.sampled_from(["i0", "i1", "i2", "i3"])
