"""Pure formatting for the CLI: values in, strings out, no printing and no I/O."""

from __future__ import annotations

import base64
import json
from typing import Any

from zbroker import Message


def payload_for_json(msg: Message) -> tuple[Any, str]:
    """(payload, encoding) for JSON output: ``text``, ``base64`` or ``msgpack`` (decoded)."""
    if msg.payload_type == "msgpack":
        try:
            json.dumps(msg.payload)
            return msg.payload, "msgpack"
        except (TypeError, ValueError):
            return base64.b64encode(msg.raw).decode("ascii"), "base64"
    try:
        return msg.raw.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(msg.raw).decode("ascii"), "base64"


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def format_message_json(msg: Message, log_seq: int | None = None) -> str:
    """One JSON object: topic, pattern, id, timestamp, headers, payload, payload_encoding
    (and log_seq for messages read from the retention log, ``redelivered: true`` for a
    durable's message that may have been processed before)."""
    payload, encoding = payload_for_json(msg)
    extra = {} if log_seq is None else {"log_seq": log_seq}
    return json.dumps(
        {
            **extra,
            "topic": msg.topic,
            "pattern": msg.pattern,
            "id": str(msg.id),
            "timestamp": msg.timestamp,
            "headers": _jsonable(msg.headers),
            "payload": _jsonable(payload),
            "payload_encoding": encoding,
            **_state_fields(msg),
            # (a durable's message that may have been processed before: say so)
            **({"redelivered": True} if msg.redelivered else {}),
        },
        separators=(",", ":"),
    )


def _state_fields(msg: Message) -> dict[str, Any]:
    """A stateful topic's version, and whether it is a snapshot value or a removal."""
    version = getattr(msg, "version", None)
    if version is None:
        return {}
    return {"version": version, "initial": msg.initial, "removed": msg.removed}


def format_message_text(msg: Message) -> str:
    """``topic [headers] payload`` with text shown as is and binary as base64."""
    payload, encoding = payload_for_json(msg)
    shown = (
        payload
        if encoding == "text"
        else (json.dumps(_jsonable(payload)) if encoding == "msgpack" else f"base64:{payload}")
    )
    head = ""
    if msg.headers:
        head = " " + " ".join(f"{k}={_jsonable(v)}" for k, v in msg.headers.items())
    return f"{msg.topic}{head} {shown}"


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain aligned text table."""
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def format_routes(routes: list[dict[str, Any]]) -> str:
    """The interest table: pattern, origin, hops, path, next-hop link."""
    if not routes:
        return "no routes"
    return format_table(
        ["pattern", "origin", "hops", "path", "next hop"],
        [
            [
                _route_pattern(r),
                r["origin"],
                r["hops"],
                " > ".join(r["path"]) or "-",
                r["link"] or "(local)",
            ]
            for r in routes
        ],
    )


def _route_pattern(r: dict[str, Any]) -> str:
    """A route's pattern: a queue group's entry says so, with the capacity behind it; a
    local branch, or selectors behind it, are marked."""
    if "group" in r:
        cap = (
            "capacity not heard yet"
            if r["members"] is None
            else (f"{r['members']} member(s), {r['free']} free credit")
        )
        return f"{r['group_pattern']} [queue {r['group']}: {cap}]"
    text = str(r["pattern"])
    if r.get("local_branch"):
        text += " (local branch)"
    if r.get("hosted_part_of"):
        text += " (hosted part of " + ", ".join(r["hosted_part_of"]) + ")"
    if r.get("selectors"):
        text += " where " + " OR ".join(r["selectors"])
    return text


def format_simulation(report: dict[str, Any]) -> str:
    """The figures of a simulation run."""
    rows = [
        ("nodes / links", f"{report['nodes']} / {report['links']}"),
        ("subscriptions", str(report["subscriptions"])),
        ("convergence time", f"{report['convergence_time'] * 1000:.1f} ms (virtual)"),
        ("advertisement frames", str(report["advert_frames"])),
        ("interest entries", str(report["interest_entries"])),
        (
            "memory per entry",
            f"{report['bytes_per_entry']:.0f} bytes ("
            + (
                "traced allocations / entries)"
                if report.get("memory_method") == "traced"
                else "RSS growth / entries)"
            ),
        ),
        ("publishes", str(report["publishes"])),
        ("messages per link per publish", f"{report['frames_per_publish']:.2f}"),
        ("deliveries / expected", f"{report['deliveries']} / {report['expected']}"),
        ("hops per delivery", f"mean {report['mean_hops']:.2f}, max {report['max_hops']}"),
        ("non-shortest deliveries", str(report["non_shortest"])),
        ("duplicates delivered", str(report["duplicates"])),
        ("messages lost", str(report["lost"])),
        ("wall time", f"{report['wall_seconds']:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def format_peers(peers: list[dict[str, Any]]) -> str:
    """Peers: id, how found, state, endpoint, links."""
    if not peers:
        return "no peers"
    return format_table(
        ["peer", "found by", "state", "endpoint", "links"],
        [
            [
                p["id"],
                ",".join(p["found_by"]),
                p["state"],
                p.get("endpoint") or "-",
                ",".join(p["links"]) or "-",
            ]
            for p in peers
        ],
    )
