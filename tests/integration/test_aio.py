"""AsyncClient: the asyncio flavour of Client, against a real in-thread node."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from zbroker import AsyncClient, Broker, Client, Message, Subscription
from zbroker.client.state import MissingTopic

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait


def test_async_publish_subscribe_exact_counts(broker: Broker) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(broker.endpoint) as client:
            assert client.broker_id == broker.broker_id
            got: list[Message] = []
            done = asyncio.Event()

            async def handler(msg: Message) -> None:
                got.append(msg)
                if len(got) == 200:
                    done.set()

            sub = await client.subscribe("A.>", handler)
            for i in range(200):
                await client.publish("A.B", str(i).encode())
            await asyncio.wait_for(done.wait(), 5)
            await asyncio.sleep(0.1)  # nothing more arrives
            assert [m.payload for m in got] == [str(i).encode() for i in range(200)]
            sub.unsubscribe()
            status = await client.status()
            assert status["counters"]["received"] == 200

    asyncio.run(main())


def test_async_messages_iterator_and_sync_handler(broker: Broker) -> None:
    async def main() -> None:
        async with await AsyncClient.connect(broker.endpoint) as client:
            seen: list[str] = []
            await client.subscribe("B.*", lambda m: seen.append(m.topic))

            async def produce() -> None:
                await asyncio.sleep(0.05)
                await client.publish_wait("B.X", {"n": 1})
                await client.publish("B.Y", {"n": 2})

            task = asyncio.create_task(produce())
            payloads = [m.payload async for m in client.messages("B.>", timeout=0.5)]
            await task
            assert payloads == [{"n": 1}, {"n": 2}]
            assert seen == ["B.X", "B.Y"]
            assert await client.routes() == [
                {"pattern": "B.*", "origin": broker.broker_id, "path": [], "hops": 0, "link": None}
            ]

    asyncio.run(main())


def _client_threads() -> int:
    return sum(t.name == "zbroker-client" for t in threading.enumerate())


def test_a_cancelled_subscribe_calls_its_handler_for_nothing(
    broker: Broker, client_factory: Callable[..., Client]
) -> None:
    """A subscribe cancelled while its executor call runs (``asyncio.wait_for``) went on
    in the executor, and the subscription it made called the handler for every message,
    with no handle to end it. A missing-topic handler holds the subscribe at the node,
    so it is cancelled while it runs."""
    asked, release = threading.Event(), threading.Event()

    def hold(notice: MissingTopic) -> str:
        asked.set()
        release.wait(WAIT)
        return "proceed"

    client_factory(broker.endpoint).on_missing_topic("H.>", hold)
    publisher = client_factory(broker.endpoint)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with await AsyncClient.connect(broker.endpoint) as client:
            after_cancel: list[Message] = []
            task = asyncio.create_task(client.subscribe("H.>", after_cancel.append))
            assert await loop.run_in_executor(None, asked.wait, WAIT)  # held at the node
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            release.set()
            # a second subscription of the pattern: its messages come in the same
            # delivery frames, each handed to the loop after the cancelled one's
            seen: list[Message] = []
            all_in = asyncio.Event()

            def on_message(msg: Message) -> None:
                seen.append(msg)
                if len(seen) == 5:
                    all_in.set()

            await client.subscribe("H.>", on_message)
            for i in range(5):
                publisher.publish("H.X", str(i).encode())
            await asyncio.wait_for(all_in.wait(), WAIT)
            assert after_cancel == []

    asyncio.run(main())


def test_a_cancelled_connect_leaves_no_client_behind(
    free_port: Callable[[], int], wait_until: Callable[..., bool], tmp_path: Path
) -> None:
    """A connect cancelled while the constructor waited for the node (``wait_for``) made
    a client anyway once the node answered, whose thread and sockets nothing closed."""
    port = free_port()
    before = _client_threads()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(AsyncClient.connect(f"tcp://{HOST}:{port}", timeout=WAIT))
        # the constructor runs: its thread waits for a node that is not there yet
        assert await loop.run_in_executor(None, wait_until, lambda: _client_threads() > before)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with Broker(host=HOST, port=port, data_dir=tmp_path / "node"):
            # the constructor returns once the node answers; the client is then closed
            gone = await loop.run_in_executor(
                None, wait_until, lambda: _client_threads() <= before, WAIT
            )
            assert gone

    asyncio.run(main())


def test_no_handler_call_once_unsubscribe_returned(
    broker: Broker, client_factory: Callable[..., Client]
) -> None:
    """Deliveries already handed to the loop when the subscription ended still ran the
    handler: hundreds of calls after ``unsubscribe()`` returned, in a burst."""
    publisher = client_factory(broker.endpoint)
    n = 500

    async def main() -> None:
        async with await AsyncClient.connect(broker.endpoint) as client:
            handle: list[Subscription] = []
            calls: list[Message] = []

            def first_only(msg: Message) -> None:
                calls.append(msg)
                handle[0].unsubscribe()

            handle.append(await client.subscribe("U.>", first_only))
            # a second subscription of the pattern: each of its deliveries reaches the
            # loop after the first one's of the same message
            seen: list[Message] = []
            all_in = asyncio.Event()

            def count(msg: Message) -> None:
                seen.append(msg)
                if len(seen) == n:
                    all_in.set()

            await client.subscribe("U.>", count)
            for i in range(n):
                publisher.publish("U.X", str(i).encode())
            await asyncio.wait_for(all_in.wait(), WAIT)
            assert [m.payload for m in calls] == [b"0"]

    asyncio.run(main())
