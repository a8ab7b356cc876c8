"""The five-node mesh that ``fault_mesh.py`` runs: each node's config (a ring
N1-N2-N3-N4-N5-N1 with the chord N1-N3, fast heartbeats), the TCP relay every link goes
through (a link cut is a cut there), starting a node and waiting until it answers, and the
faults injected into it, one at a time."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from cutproxy import CutProxy

NODES = ("N1", "N2", "N3", "N4", "N5")
DIALS = {"N1": (), "N2": ("N1",), "N3": ("N2", "N1"), "N4": ("N3",), "N5": ("N4", "N1")}
FAULTY = ("N1", "N2", "N3", "N4")
WAIT = 120.0

NODE = '[node]\nid = "{id}"\nhost = "127.0.0.1"\nport = {port}\ndata_dir = "{data}"\n'
LINK = (
    '\n[[link]]\nname = "{name}"\nuri = "tcp://127.0.0.1:{port}"\nheartbeat_interval = 0.2\n'
    "heartbeat_timeout = 1.0\nreconnect_initial_delay = 0.1\nreconnect_max_delay = 0.5\n"
)


class Proc(Protocol):
    """What the run needs of a process it started (tests pass their fixture's)."""

    popen: Any

    def readline(self, timeout: float) -> str | None: ...


Start = Callable[[list[str]], Proc]


class Mesh:
    def __init__(self, start: Start, tmp: Path, ports: dict[str, int], zbroker: str) -> None:
        self._start, self.ports, self._zbroker = start, ports, zbroker
        self.configs: dict[str, Path] = {}
        #: link name -> the relay it goes through (a link cut is a cut there)
        self.proxies: dict[str, CutProxy] = {}
        for name in NODES:
            text = NODE.format(id=name, port=ports[name], data=tmp / name)
            for peer in DIALS[name]:
                link = f"{name}-{peer}".lower()
                self.proxies[link] = CutProxy(ports[peer])
                text += LINK.format(name=link, port=self.proxies[link].port)
            self.configs[name] = tmp / f"{name}.toml"
            self.configs[name].write_text(text)
        self.procs: dict[str, Proc] = {}

    def ep(self, name: str) -> str:
        return f"tcp://127.0.0.1:{self.ports[name]}"

    def link_up(self, link: str) -> bool:
        """Does the node that dials ``link`` (``n3-n1``: N3) have it up?"""
        from zbroker import Client

        with Client(self.ep(link.split("-")[0].upper()), timeout=2.0) as c:
            return any(ln["name"] == link and ln["state"] == "up" for ln in c.status()["links"])

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()

    def start(self, name: str) -> None:
        self.procs[name] = self._start(
            [self._zbroker, "start", "--config", str(self.configs[name])]
        )

    def up(self, name: str, wait: Callable[..., bool]) -> bool:
        from zbroker import Client

        def answers() -> bool:
            try:
                with Client(self.ep(name), timeout=2.0) as c:
                    c.status()
                return True
            except Exception:
                return False

        return wait(answers, WAIT)


def inject_fault(mesh: Mesh, rng: random.Random, wait: Callable[..., bool]) -> str:
    """One fault, undone before it returns (every node answers again)."""
    kind = rng.random()
    if kind >= 2 / 3:
        link = rng.choice(sorted(mesh.proxies))
        away = rng.uniform(2.0, 4.0)
        began = time.monotonic()
        mesh.proxies[link].cut()
        # both nodes run; the dialer must see its link die (heartbeat_timeout 1 s)
        died = wait(lambda: not mesh.link_up(link), away)
        time.sleep(max(0.0, away - (time.monotonic() - began)))
        mesh.proxies[link].mend()
        if not died:
            raise RuntimeError(f"link {link} stayed up through a {away:.1f} s cut")
        return f"cut link {link} {away:.1f} s, mended"
    name = rng.choice(FAULTY)
    proc = mesh.procs[name]
    if kind < 1 / 3:
        proc.popen.kill()
        proc.popen.wait(WAIT)
        time.sleep(rng.uniform(0.5, 2.0))
        mesh.start(name)
        what = f"SIGKILL {name}, restarted"
    else:
        proc.popen.send_signal(signal.SIGSTOP)
        away = rng.uniform(2.0, 4.0)
        time.sleep(away)
        proc.popen.send_signal(signal.SIGCONT)
        what = f"SIGSTOP {name} {away:.1f} s, SIGCONT"
    if not mesh.up(name, wait):
        raise RuntimeError(f"{name} did not come back after: {what}")
    return what
