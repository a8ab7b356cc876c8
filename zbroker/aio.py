"""AsyncClient: the asyncio flavour of :class:`~zbroker.client.Client`, same shape.

It wraps the threaded client rather than re-implementing the protocol: the client thread
still owns the sockets, and deliveries cross into the event loop with
``loop.call_soon_threadsafe``. Calls that wait for the node (connect, subscribe, status,
routes) run in the default executor so the loop never blocks; ``publish`` is a plain
non-blocking send in the common case and only falls back to the executor when the send
queue is full. An executor call cannot be interrupted: a ``connect`` or ``subscribe``
cancelled while it runs goes on there, and what it makes is closed once it is made.

    async with await AsyncClient.connect("tcp://127.0.0.1:7100") as client:
        await client.subscribe("PRICE.>", handler)      # handler may be async
        await client.publish("PRICE.IBM", b"101.5")
        async for msg in client.messages("NEWS.*", timeout=1.0):
            ...
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

from .client import Client, Message, Subscription
from .const import DEFAULT_BROKER

__all__ = ["AsyncClient"]

Handler = Callable[[Message], Any] | Callable[[Message], Awaitable[Any]]
T = TypeVar("T")


class AsyncClient:
    """An asyncio client. Create it with ``await AsyncClient.connect(...)``."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()

    @classmethod
    async def connect(cls, broker: str = DEFAULT_BROKER, **options: Any) -> AsyncClient:
        """Connect (HELLO) without blocking the loop; options are Client's. Cancelled
        (``asyncio.wait_for``), it closes the client once the executor has made it."""
        loop = asyncio.get_running_loop()
        made = loop.run_in_executor(None, functools.partial(Client, broker, **options))
        client = await _undone_if_cancelled(loop, made, Client.close)
        return cls(client, loop)

    @property
    def broker_id(self) -> str:
        return self._client.broker_id

    async def publish(
        self, topic: str, payload: Any = b"", headers: dict[str, Any] | None = None
    ) -> None:
        """Publish; a non-blocking send in the common case. When the node applies
        back-pressure (full send queue) this waits on the loop's thread up to
        ``publish_timeout``: publishers that expect back-pressure use :meth:`publish_wait`."""
        self._client.publish(topic, payload, headers)

    async def publish_wait(
        self, topic: str, payload: Any = b"", headers: dict[str, Any] | None = None
    ) -> None:
        """Publish from the executor: never blocks the loop, even under back-pressure."""
        await self._loop.run_in_executor(
            None, functools.partial(self._client.publish, topic, payload, headers)
        )

    async def subscribe(
        self, pattern: str, handler: Handler, *, selector: str | None = None
    ) -> Subscription:
        """Call ``handler(msg)`` in the event loop for each message; ``handler`` may be a
        coroutine function (each call becomes a task). ``selector``: as
        :meth:`Client.subscribe`'s. Once ``unsubscribe()`` (or :meth:`close`) returned
        the handler is called no more. Cancelled, it calls ``handler`` for nothing and
        ends the subscription once the executor has made it."""
        loop = self._loop
        is_async = inspect.iscoroutinefunction(handler)
        cancelled = False
        made: list[Subscription] = []  # the handle, once subscribe() returned

        def run(msg: Message) -> None:
            # (deliveries handed to the loop before an unsubscribe() run after it: not
            # the handler)
            if cancelled or (made and not made[0].active):
                return
            if is_async:
                task = loop.create_task(handler(msg))  # type: ignore[arg-type]
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                handler(msg)

        def from_thread(msg: Message) -> None:
            try:
                loop.call_soon_threadsafe(run, msg)
            except RuntimeError:  # the loop is closed: nothing can run the handler
                pass

        call = loop.run_in_executor(
            None, functools.partial(self._client.subscribe, pattern, from_thread, selector=selector)
        )
        try:
            sub = await _undone_if_cancelled(loop, call, Subscription.unsubscribe)
        except asyncio.CancelledError:
            cancelled = True
            raise
        made.append(sub)
        return sub

    async def messages(self, pattern: str, timeout: float | None = None) -> AsyncIterator[Message]:
        """Async iterator over messages matching ``pattern``; ends after ``timeout`` seconds
        without one (``None``: never)."""
        queue: asyncio.Queue[Message] = asyncio.Queue()
        sub = await self.subscribe(pattern, queue.put_nowait)
        try:
            while True:
                try:
                    yield await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    return
        finally:
            await self._loop.run_in_executor(None, sub.unsubscribe)

    async def status(self) -> dict[str, Any]:
        return await self._loop.run_in_executor(None, self._client.status)

    async def routes(self, pattern: str | None = None) -> list[dict[str, Any]]:
        return await self._loop.run_in_executor(None, self._client.routes, pattern)

    async def close(self) -> None:
        await self._loop.run_in_executor(None, self._client.close)
        for task in list(self._tasks):
            task.cancel()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def _undone_if_cancelled(
    loop: asyncio.AbstractEventLoop, made: asyncio.Future[T], undo: Callable[[T], Any]
) -> T:
    """What the executor call ``made`` returns. A thread cannot be interrupted: if the
    caller is cancelled meanwhile, the call goes on, and ``undo`` (run in the executor)
    closes what it made once it is made: a cancelled connect or subscribe left a client
    thread, or a subscription calling its handler, that nothing referred to."""
    try:
        return await asyncio.shield(made)
    except asyncio.CancelledError:

        def undone(f: asyncio.Future[T]) -> None:
            if not f.cancelled() and f.exception() is None:
                loop.run_in_executor(None, undo, f.result())

        made.add_done_callback(undone)
        raise
