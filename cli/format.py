"""Pure formatting for the CLI: values in, strings out, no printing and no I/O."""

from __future__ import annotations

import base64
import json
from typing import Any

from zbroker import Message

#: subscription patterns `zbroker status` lists in its text form (the JSON has them all)
STATUS_PATTERNS_SHOWN = 20


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


def format_status(status: dict[str, Any]) -> str:
    """The node's status as a readable table: a summary of name/value rows, then the
    tables of links and of store-and-forward queues (each only when there are any)."""
    rows = [
        *_identity_rows(status),
        *_counter_rows(status.get("counters", {})),
        *_security_rows(status.get("security") or {}),
        *_subscription_rows(status.get("subscriptions", {})),
        *_interest_rows(status.get("interest")),
        *_staging_rows(status.get("staging")),
        *_advisory_rows(status.get("advisories")),
    ]
    width = max(len(k) for k, _ in rows)
    text = "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
    links = status.get("links") or []
    if links:
        text += "\n\n" + _links_table(links)
    queues = (status.get("forward") or {}).get("queues") or []
    if queues:
        text += "\n\n" + _forward_table(queues)
    return text


Rows = list[tuple[str, str]]


def _identity_rows(status: dict[str, Any]) -> Rows:
    """Who the node is and where it listens."""
    rows: Rows = [
        ("broker id", str(status.get("broker_id"))),
        ("incarnation", str(status.get("incarnation"))),
    ]
    if "version" in status:  # linked nodes must speak the same one
        rows.append(("protocol version", str(status["version"])))
    if "group" in status:
        rows.append(("group", str(status["group"])))
    rows.append(("uptime", f"{status.get('uptime', 0):.1f} s"))
    for name, ep in status.get("endpoints", {}).items():
        rows.append((f"{name} endpoint", str(ep)))
    return rows


def _counter_rows(c: dict[str, Any]) -> Rows:
    """Message counters, and drops by reason."""
    rows: Rows = [
        ("received", str(c.get("received", 0))),
        ("delivered", str(c.get("delivered", 0))),
        ("bad input", str(c.get("bad_input", 0))),
    ]
    if "unrouted" in c:  # client publishes no subscriber anywhere wanted
        rows.append(("no subscriber", str(c["unrouted"])))
    for reason, n in c.get("dropped", {}).items():
        rows.append((f"dropped: {reason}", str(n)))
    # every other counter under its own name (as --json, the docs and the metrics name
    # them): forwarded, duplicates, links_up, shortcut, durable_moves, ...
    rows += [(k, str(v)) for k, v in c.items() if k not in _COUNTERS_SHOWN and type(v) is int]
    return rows


#: counters the rows above (or the security rows, which show auth failures) already show
_COUNTERS_SHOWN = frozenset(
    {"received", "delivered", "bad_input", "unrouted", "dropped", "auth_failures"}
)


def _security_rows(sec: dict[str, Any]) -> Rows:
    """CURVE key and the failures it counted (nothing when security is off)."""
    if not sec.get("enabled"):
        return []
    rows: Rows = [
        ("security", f"CURVE, public key {sec.get('public_key')}"),
        ("auth failures", str(sec.get("auth_failures", 0))),
    ]
    # handshakes that failed before any key was checked (a plain client, a wrong
    # server key): logged by the node, and shown here so that nobody needs the log
    for reason, n in sec.get("handshake_failures", {}).items():
        rows.append((f"handshake failed: {reason}", str(n)))
    for kind, n in sec.get("refused", {}).items():
        rows.append((f"refused: {kind}", str(n)))
    return rows


def _advisory_rows(adv: dict[str, Any] | None) -> Rows:
    """Advisories published, and those the rate limit held back (when the feature runs)."""
    if not adv:
        return []
    held = sum(adv.get("suppressed", {}).values())
    return [("advisories", f"{adv.get('emitted', 0)} published, {held} suppressed")]


def _subscription_rows(subs: dict[str, Any]) -> Rows:
    """Local subscriptions: the count and the first patterns."""
    rows: Rows = [("subscriptions", str(subs.get("count", 0)))]
    patterns = subs.get("patterns", [])
    # a node may hold tens of thousands: the summary lists a few (--json has them all)
    for p in patterns[:STATUS_PATTERNS_SHOWN]:
        rows.append(("  pattern", p))
    if len(patterns) > STATUS_PATTERNS_SHOWN:
        more = len(patterns) - STATUS_PATTERNS_SHOWN
        rows.append(("  ...", f"{more} more (zbroker status --json lists every one)"))
    return rows


def _interest_rows(interest: dict[str, Any] | None) -> Rows:
    """The interest table's size and the origins it holds."""
    if not interest:
        return []
    rows = [
        ("interest routes", f"{interest.get('routes', 0)} ({interest.get('remote', 0)} remote)"),
        ("interest origins", ", ".join(interest.get("origins", [])) or "-"),
    ]
    branches = interest.get("local_branches") or []
    if branches:
        rows.append(("local branches", f"{', '.join(branches)} (never leave this node)"))
    return rows


def _staging_rows(staging: dict[str, Any] | None) -> Rows:
    """Staged writes, once there were any."""
    if not staging or not (staging.get("commits") or staging.get("tokens")):
        return []
    return [
        (
            "staged writes",
            f"{staging['tokens']} tokens waiting ({staging['rows']} rows), "
            f"{staging['commits']} commits, {staging['applied_rows']} rows published, "
            f"{staging['duplicate_commits']} duplicate commits, "
            f"{staging['aborted_rows']} rows aborted, {staging['expired_rows']} expired",
        )
    ]


def _links_table(links: list[dict[str, Any]]) -> str:
    """One row per link, then why each link that is not up is not."""
    text = format_table(
        [
            "link",
            "peer",
            "kind",
            "direction",
            "state",
            "uptime",
            "msgs in",
            "msgs out",
            "bytes in",
            "bytes out",
            "drops",
        ],
        [
            [
                ln["name"],
                ln.get("peer") or "-",
                ln["kind"],
                ln["direction"],
                ln["state"],
                f"{ln.get('uptime', 0):.1f}s",
                ln["msgs_in"],
                ln["msgs_out"],
                ln["bytes_in"],
                ln["bytes_out"],
                ln["drops"],
            ]
            for ln in links
        ],
    )
    # why a link is not up (unreachable peer, refused handshake): said, not only logged
    for ln in links:
        if ln["state"] != "up" and ln.get("last_error"):
            tries = f" (attempt {ln['attempts']})" if ln.get("attempts") else ""
            text += f"\n  {ln['name']} ({ln['state']}): {ln['last_error']}{tries}"
    return text


def _forward_table(queues: list[dict[str, Any]]) -> str:
    """Store-and-forward: persistent messages held per link until the next node has them."""
    return format_table(
        ["link queue", "peer", "up", "queued", "bytes", "in flight", "sent", "acked", "dropped"],
        [
            [
                q["link"],
                q["peer"],
                "yes" if q["up"] else "no",
                q["queued"],
                q["queued_bytes"],
                q["in_flight"],
                q["sent"],
                q["acked"],
                q["dropped"],
            ]
            for q in queues
        ],
    )


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
