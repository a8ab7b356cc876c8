"""``zbroker status`` as text: name/value rows (identity, counters, security,
subscriptions, interest, stateful topics, staging, advisories), then a table each for
links, store-and-forward queues, replicas and retention rules, each only when there are
any. Values in, a string out; the JSON (``--json``) holds everything, the text a readable
summary."""

from __future__ import annotations

from typing import Any

from .format import format_table

#: subscription patterns `zbroker status` lists in its text form (the JSON has them all)
STATUS_PATTERNS_SHOWN = 20


def format_status(status: dict[str, Any]) -> str:
    """The node's status as a readable table: a summary of name/value rows, then the
    tables of links, store-and-forward queues and replicas (each only when there are any)."""
    rows = [
        *_identity_rows(status),
        *_counter_rows(status.get("counters", {})),
        *_security_rows(status.get("security") or {}),
        *_subscription_rows(status.get("subscriptions", {})),
        *_interest_rows(status.get("interest")),
        *_state_rows(status.get("state")),
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
    replicas = status.get("replication") or {}
    if replicas:
        text += "\n\n" + _replication_table(replicas)
    store = status.get("store") or {}
    if store.get("rules"):
        text += "\n\n" + _retention_table(store)
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


def _state_rows(state: dict[str, Any] | None) -> Rows:
    """Stateful topics held here and the snapshot queries asked of this node."""
    if not state:
        return []
    missing = state.get("missing") or {}
    rows: Rows = [
        (
            "stateful topics",
            f"{state.get('owned', 0)} owned, {state.get('replicas', 0)} replicas, "
            f"{state.get('tombstones', 0)} removed (kept as tombstones; "
            f"{state.get('tombstones_expired', 0)} expired)",
        ),
        (
            "snapshot queries",
            f"{state.get('queries_pending', 0)} pending, {state.get('queries_answered', 0)} "
            f"answered, {state.get('queries_expired', 0)} expired",
        ),
    ]
    if missing.get("handlers"):
        rows.append(("missing-topic handlers", ", ".join(missing["handlers"])))
    return rows


def _retention_table(store: dict[str, Any]) -> str:
    """The retention log: one row per ``[[retain]]`` rule, then what the log refused."""
    text = format_table(
        ["retain rule", "held", "bytes", "max msgs", "max bytes", "max age", "overflow"],
        [
            [
                r["pattern"], r["held_msgs"], r["held_bytes"], r["max_msgs"] or "-",
                r["max_bytes"] or "-", f"{r['max_age']:g} s" if r["max_age"] else "-",
                r["overflow"],
            ]
            for r in store["rules"]
        ],
    )  # fmt: skip
    log = f"  log seqs {store.get('first_seq')}..{store.get('last_seq')}"
    text += f"\n{log}, {store.get('retained_rows', 0)} rows"
    for reason, n in (store.get("dropped") or {}).items():
        text += f"\n  dropped: {reason}  {n}"
    return text


def _replication_table(replicas: dict[str, dict[str, Any]]) -> str:
    """Fan-out replication: one row per replicating link, its state and lag."""
    return format_table(
        ["replica link", "primary", "branches", "state", "topics", "lag", "syncs", "retries",
         "retry delay", "sessions lost"],
        [
            [
                name,
                r.get("primary") or "-",
                ", ".join(r.get("branches", [])),
                r["state"],
                r["topics"],
                "-" if r.get("lag") is None else f"{r['lag'] * 1000:.1f} ms",
                r["syncs"],
                r["retries"],
                "-" if r.get("retry_delay") is None else f"{r['retry_delay']:g} s",
                r["sessions_lost"],
            ]
            for name, r in replicas.items()
        ],
    )  # fmt: skip
