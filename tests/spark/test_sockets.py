"""Network safety of the test session: every socket the Spark JVM listens on is bound to
the loopback address (the session is configured with driver host and bind address
127.0.0.1 and SPARK_LOCAL_IP)."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Any


def _listening(proto: str) -> dict[int, str]:
    """inode -> local address of every listening socket in /proc/net/{proto}."""
    out: dict[int, str] = {}
    path = Path("/proc/net") / proto
    if not path.exists():
        return out
    for line in path.read_text().splitlines()[1:]:
        fields = line.split()
        local, state, inode = fields[1], fields[3], int(fields[9])
        if state != "0A":  # TCP_LISTEN
            continue
        hexaddr = local.split(":")[0]
        raw = bytes.fromhex(hexaddr)
        if proto == "tcp":
            addr = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(hexaddr, 16)))
        else:  # each 32-bit word is little-endian
            words = struct.unpack("<4I", raw)
            addr = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
        out[inode] = addr
    return out


def test_the_spark_jvm_listens_only_on_loopback(spark: Any) -> None:
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    listening = {**_listening("tcp"), **_listening("tcp6")}
    ours = {listening[i] for i in inodes if i in listening}
    assert ours, "the JVM should listen somewhere (the py4j gateway, the block manager)"
    assert ours <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, ours
