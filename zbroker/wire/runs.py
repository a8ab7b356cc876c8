"""MSGR frames: a link frame's messages as runs, the fields a run shares sent once.

A run is consecutive messages of one origin (and incarnation) on one topic, by one path,
for the same targets: a publisher's flood, cut into frames, is a few runs. In a MSGS frame
every message repeats those five fields; in a MSGR frame the run carries them once and
each message only its own::

    MSGR [36, [[topic, origin, incarnation, path: [str], targets: [str] | nil,
                [[payload, fmt, headers, seq, ts], ...]], ...]]

so a relay decodes five objects per message instead of ten and forwards a run's entries
as they came (:mod:`zbroker.node.relay`). The checks are MSGS's (:func:`.link.check_msgs`),
split between a run's shared fields and its entries: a run whose shared fields are bad
loses every entry it holds (one error each: each was a message), a bad entry alone is
replaced by None (and the run loses its entries' bytes, if the decode kept them:
:mod:`.splice`). A run without entries is bad (``bad_shape``, counted as one message): a
frame of empty runs would otherwise cost the node a route each and its sender nothing
against the read budget.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidTopic, ProtocolError
from .frames import I64, TS_MAX, Errors
from .link import _checked, _valid_topic

__all__ = ["check_runs", "held", "runs_of_msgs"]


def held(runs: list[Any]) -> int:
    """The messages a MSGR frame's runs hold, as the sender meant them: a run's entries,
    or one for a run too malformed to say or empty (what the read budget and counters
    count: a frame of empty runs costs its sender as much as one of messages)."""
    return sum([len(run[5]) if _shaped(run) else 1 for run in runs])


def _shaped(run: Any) -> bool:
    """Whether ``run`` has a run's shape: six elements, the last a non-empty array (and,
    if the frame's decode kept them, its entries' bytes: :mod:`.splice`)."""
    return (
        type(run) is list
        and (len(run) == 6 or (len(run) == 7 and type(run[6]) is memoryview))
        and type(run[5]) is list
        and len(run[5]) > 0
    )


def check_runs(
    runs: list[Any],
    caches: tuple[set[tuple[Any, ...]], set[tuple[Any, ...]], set[str] | None],
    errors: Errors,
) -> None:
    """Type-check a MSGR frame's runs in place: a good run gets its path and targets as
    tuples (what routing keys on), a bad run is replaced by None and a bad entry too (the
    reasons in ``errors``, one per message lost). ``caches``: as for ``check_msgs``."""
    paths_ok, targets_ok, valid = caches
    for i, run in enumerate(runs):
        try:
            if not _shaped(run):
                raise ProtocolError("bad_shape", "MSGR run must be a 6-element array with entries")
            topic, origin, inc, path, targets, entries = run[:6]
            if (
                type(topic) is not str
                or type(origin) is not str
                or type(inc) is not int
                or type(path) is not list
                or (targets is not None and type(targets) is not list)
            ):
                raise ProtocolError("bad_type", "MSGR run has wrong field types")
            run[3] = _checked(tuple(path), paths_ok)  # (unhashable elements: TypeError)
            if targets is not None:
                run[4] = _checked(tuple(targets), targets_ok)
            if not 0 <= inc < I64:
                raise ProtocolError("bad_value", "MSGR run has out-of-range numbers")
            if valid is not None and topic not in valid:
                _valid_topic(topic, valid)
        except ProtocolError as exc:
            _lost(run, (exc.reason, exc.detail), errors)
        except InvalidTopic as exc:
            _lost(run, ("bad_topic", str(exc)), errors)
        except TypeError as exc:  # unhashable path/targets elements
            _lost(run, ("bad_type", str(exc)), errors)
        else:
            bad = len(errors)
            _check_entries(entries, errors)
            if len(errors) != bad and len(run) == 7:
                del run[6]  # (bad entries became None: the bytes are no longer theirs)
            continue
        runs[i] = None


def _lost(run: Any, error: tuple[str, str], errors: Errors) -> None:
    """A bad run: one error per message it held (as :func:`held` counts them)."""
    errors.extend([error] * held([run]))


def _check_entries(entries: list[Any], errors: Errors) -> None:
    """A run's entries ``[payload, fmt, headers, seq, ts]``: a bad one becomes None."""
    _bytes, _int, _float, _list, _dict = bytes, int, float, list, dict
    i64, ts_max = I64, TS_MAX
    for j, e in enumerate(entries):
        if type(e) is not _list or len(e) != 5:
            errors.append(("bad_shape", "MSGR entry must be a 5-element array"))
        else:
            payload, fmt, headers, seq, ts = e
            if (
                type(payload) is not _bytes
                or type(fmt) is not _int
                or (fmt != 0 and fmt != 1)
                or (headers is not None and type(headers) is not _dict)
                or type(seq) is not _int
                or (type(ts) is not _float and type(ts) is not _int)
            ):
                errors.append(("bad_type", "MSGR entry has wrong field types"))
            elif not (0 <= seq < i64 and -ts_max < ts < ts_max):
                # out of what the store can hold (and NaN fails every comparison)
                errors.append(("bad_value", "MSGR entry has out-of-range numbers"))
            else:
                continue
        entries[j] = None


def runs_of_msgs(batch: list[Any]) -> list[list[Any]]:
    """Checked MSGS entries (``check_msgs``; None for a bad one) as MSGR runs, in order:
    the relay takes runs only."""
    runs: list[list[Any]] = []
    entries: list[Any] | None = None
    r_topic = r_origin = r_inc = r_path = r_targets = None
    for m in batch:
        if m is None:
            continue
        topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
        if (
            entries is None
            or topic != r_topic
            or origin != r_origin
            or inc != r_inc
            or path != r_path
            or targets != r_targets
        ):
            r_topic, r_origin, r_inc, r_path, r_targets = topic, origin, inc, path, targets
            entries = []
            runs.append([topic, origin, inc, path, targets, entries])
        entries.append([payload, fmt, headers, seq, ts])
    return runs
