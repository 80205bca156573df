"""A TCP proxy on 127.0.0.1 that adds latency: the test bed's "slow broker".

A broker listener marked ``via_proxy`` advertises the proxy's port instead of its own, so
every client connection (bootstrap and the connections the metadata points to) goes
through a :class:`DelayProxy`. Each chunk a client sends waits ``delay_s`` before it is
forwarded to the broker (responses flow back at once), so each request gains about
``delay_s`` of latency; ``hold=True`` makes the proxy accept connections and forward
nothing (a broker that accepts and never answers, for this listener only).

Chosen over ``tc netem`` in a network namespace because it needs no privileges, no second
network stack for the JVM, and affects only the listener under test (the test bed's own
PLAINTEXT listener and the controller stay fast, so set-up and oracles are not slowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

log = logging.getLogger(__name__)

CHUNK = 65536


class DelayProxy:
    """Forward ``127.0.0.1:listen_port`` to ``127.0.0.1:target_port`` with added latency."""

    def __init__(self, listen_port: int, target_port: int, *, delay_s: float = 0.0) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.delay_s = delay_s
        self.hold = False
        self.connections = 0  # accepted so far
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name=f"delay-proxy-{self.listen_port}", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)
        if self._error is not None:
            raise RuntimeError(f"proxy on port {self.listen_port}: {self._error}")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        self._thread = None

    def drop_connections(self) -> None:
        """Close every open connection (clients reconnect through the proxy)."""
        loop = self._loop
        if loop is not None:
            for task in list(self._tasks):
                loop.call_soon_threadsafe(task.cancel)

    # -- the event loop thread ---------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)
            )
        except OSError as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            with contextlib.suppress(Exception):
                loop.run_until_complete(self._server.wait_closed())
            loop.close()
            self._loop = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while self.hold:
                await asyncio.sleep(0.05)
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError as exc:
                log.debug("proxy %d: broker port %d: %s", self.listen_port, self.target_port, exc)
                return
            try:
                await asyncio.gather(
                    self._pump(reader, up_writer, delayed=True),
                    self._pump(up_reader, writer, delayed=False),
                )
            finally:
                up_writer.close()
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    *, delayed: bool) -> None:  # fmt: skip
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                while self.hold:
                    await asyncio.sleep(0.05)
                if delayed and self.delay_s > 0:
                    await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
