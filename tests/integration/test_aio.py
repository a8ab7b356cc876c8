"""AsyncClient: the asyncio flavour of Client, against a real in-thread node."""

from __future__ import annotations

import asyncio

from zbroker import AsyncClient, Broker, Message


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
