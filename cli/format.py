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


def format_message_json(msg: Message) -> str:
    """One JSON object: topic, pattern, id, timestamp, headers, payload, payload_encoding."""
    payload, encoding = payload_for_json(msg)
    return json.dumps(
        {
            "topic": msg.topic,
            "pattern": msg.pattern,
            "id": str(msg.id),
            "timestamp": msg.timestamp,
            "headers": _jsonable(msg.headers),
            "payload": _jsonable(payload),
            "payload_encoding": encoding,
        },
        separators=(",", ":"),
    )


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
    """The node's status as a readable table."""
    c = status.get("counters", {})
    subs = status.get("subscriptions", {})
    rows: list[tuple[str, str]] = [
        ("broker id", str(status.get("broker_id"))),
        ("incarnation", str(status.get("incarnation"))),
        ("uptime", f"{status.get('uptime', 0):.1f} s"),
    ]
    for name, ep in status.get("endpoints", {}).items():
        rows.append((f"{name} endpoint", str(ep)))
    rows += [
        ("received", str(c.get("received", 0))),
        ("delivered", str(c.get("delivered", 0))),
        ("bad input", str(c.get("bad_input", 0))),
    ]
    for reason, n in c.get("dropped", {}).items():
        rows.append((f"dropped: {reason}", str(n)))
    rows.append(("subscriptions", str(subs.get("count", 0))))
    for p in subs.get("patterns", []):
        rows.append(("  pattern", p))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
