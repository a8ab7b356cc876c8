"""The network map page in a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium): a chain A - B - C, the page served by A's
monitor draws the three nodes and both links; B stops (A's link to it is cut) and the
page shows that link's state change and C gone; B back, all is drawn again. A screenshot
of each moment is saved under the test's temporary directory."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.monitor.helpers import FAST_MONITOR, dialling_each_other, get, monitor_url
from tests.node_configs import FAST_LINK
from zbroker import Broker, Client
from zbroker.config import LinkConfig

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT = 30.0


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium with a fresh profile, quit (by its driver) at teardown."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    for binary in (CHROMIUM, CHROMEDRIVER):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} is not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,800",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


def _drawn(driver: Any) -> dict[str, Any]:
    """What the page draws now: nodes, links with their states, refresh count."""
    drawn: dict[str, Any] = driver.execute_script(
        """
        const links = {};
        for (const g of document.querySelectorAll('#map [data-link]'))
            links[g.dataset.link] = g.dataset.state;
        return {
            nodes: [...document.querySelectorAll('#map [data-node]')]
                .map(g => g.dataset.node).sort(),
            links: links,
            subscriptions: [...document.querySelectorAll('[data-subscription]')]
                .map(e => e.dataset.subscription),
            queues: [...document.querySelectorAll('[data-queue]')].map(e => e.dataset.queue),
            refreshes: Number(document.body.dataset.refreshes),
        };
        """
    )
    return drawn


def _wait_drawn(driver: Any, cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT
    seen = _drawn(driver)
    while not cond(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
        seen = _drawn(driver)
    assert cond(seen), seen
    return seen


def test_map_page_draws_the_network_and_a_cut_link(
    browser: Any,
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    tmp_path: Path,
) -> None:
    port_b = free_port()
    c = broker_factory(broker_id="C")
    b_links = (LinkConfig(name="bc", uri=c.endpoint, **FAST_LINK),)

    def start_b() -> Broker:
        return broker_factory(broker_id="B", port=port_b, data_dir=tmp_path / "B", links=b_links)

    b = start_b()
    a = broker_factory(
        broker_id="A",
        monitor=FAST_MONITOR,
        links=(LinkConfig(name="ab", uri=b.endpoint, **FAST_LINK),),
    )
    client_factory(a.endpoint).subscribe("here.>", Collector())
    client_factory(c.endpoint).subscribe("far.>", Collector())
    url = monitor_url(a)
    code, page = get(url + "/")
    assert code == 200 and b"<svg" in page
    for outside in (b"src=", b"<link", b"@import", b"url("):  # nothing it loads itself
        assert outside not in page

    browser.get(url + "/")
    whole = _wait_drawn(browser, lambda d: len(d["nodes"]) == 3 and len(d["links"]) == 2)
    assert whole["nodes"] == ["A", "B", "C"]
    assert whole["links"] == {"A|B": "up", "C|B": "route"}
    assert whole["subscriptions"] == ["here.>"]
    browser.save_screenshot(str(tmp_path / "map-whole.png"))
    fetched = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    # everything the page fetched came from the node (the browser adds /favicon.ico)
    assert fetched and all(name.startswith(url + "/") for name in fetched), fetched

    b.stop()  # cuts A's link to B (and B's to C)
    cut = _wait_drawn(browser, lambda d: d["links"].get("A|B") not in (None, "up"))
    assert cut["links"]["A|B"] in ("waiting", "handshaking")
    cut = _wait_drawn(browser, lambda d: len(d["nodes"]) == 2)
    assert cut["nodes"] == ["A", "B"] and list(cut["links"]) == ["A|B"]
    browser.save_screenshot(str(tmp_path / "map-cut.png"))

    start_b()
    back = _wait_drawn(browser, lambda d: len(d["nodes"]) == 3 and d["links"].get("A|B") == "up")
    assert back["links"] == {"A|B": "up", "C|B": "route"}
    # a queue group's row is named by its group (it has no "name": the attribute was empty)
    client_factory(a.endpoint).subscribe("jobs.>", Collector(), queue="workers")
    assert _wait_drawn(browser, lambda d: d["queues"] == ["workers"])["queues"] == ["workers"]
    browser.save_screenshot(str(tmp_path / "map-back.png"))
    for name in ("map-whole.png", "map-cut.png", "map-back.png"):
        assert (tmp_path / name).stat().st_size > 1000


def test_the_links_panel_lists_every_link_to_one_peer(
    browser: Any,
    broker_factory: Callable[..., Broker],
    free_port: Callable[[], int],
) -> None:
    """A dials B ("ab") and B dials A ("ba"): A has two links to B. The map draws one
    line between them, and its Links panel (and /api/graph's ``links``) lists both."""
    a = dialling_each_other(broker_factory, free_port, "ab", "ba")
    url = monitor_url(a)

    def rows() -> dict[str, str]:
        found: dict[str, str] = browser.execute_script(
            """
            const rows = {};
            for (const li of document.querySelectorAll('#links [data-link-row]'))
                rows[li.dataset.linkRow] = li.dataset.state;
            return rows;
            """
        )
        return found

    browser.get(url + "/")
    deadline = time.monotonic() + WAIT
    while rows() != {"ab": "up", "ba": "up"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rows() == {"ab": "up", "ba": "up"}
    assert _drawn(browser)["links"] == {"A|B": "up"}
    code, body = get(url + "/api/graph")
    graph = json.loads(body)
    assert code == 200 and [e["b"] for e in graph["edges"]] == ["B"]
    assert sorted((ln["link"], ln["b"], ln["kind"]) for ln in graph["links"]) == [
        ("ab", "B", "static"),
        ("ba", "B", "accepted"),
    ]
