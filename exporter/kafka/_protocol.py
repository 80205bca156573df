"""The one seam to kafka-python's internals.

kafka-python serves the requests librdkafka has no admin call for (DescribeProducers,
ListTransactions, DescribeTransactions, FindCoordinator, ApiVersions features, Fetch of one
batch, WriteTxnMarkers, InitProducerId). Its public ``KafkaAdminClient`` wraps only some of
them and retries on its own terms, so the request families build protocol messages
themselves and send them through this module, which is the only place that touches
kafka-python's private attributes:

* ``KafkaNetClient._manager`` (the connection manager): ``run`` (run a coroutine on the I/O
  thread), ``send`` (one request to one node, with a request timeout), ``wait_for`` (await
  a future with a timeout), ``cluster.request_update``, ``_auth_failures`` (the login
  failure a node's connection recorded), and ``_backoff`` with ``reset_backoff`` (the
  reconnect backoff of each node);
* ``KafkaNetClient._net`` (the selector): ``sleep`` and ``stop`` (the I/O thread);
* the request protocol the connection speaks (``API_VERSION``, ``with_header``, ``header``,
  ``encode``, ``expect_response``) and ``RequestHeader.get_response_class`` (how the
  connection's reader finds the decoder of a request's response): :class:`DecodedBy` wraps
  one request so that its own response is decoded by a function of ours, as kafka-python's
  raw SASL request does; nothing of kafka-python is replaced for the process;
* ``ApiMessage.encode_header`` and ``flexible_version_q`` (a request's header, and whether a
  version is flexible): :class:`EncodedBy` sends a request whose body we write ourselves.

:data:`INTERNALS` lists them; ``tests/unit/test_kafka_protocol.py`` checks that the
installed kafka-python still has every one, so an upgrade that moves them fails a unit test
instead of a cycle.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from exporter.kafka.errors import KafkaUnavailable, error_name

K = TypeVar("K")
#: (class path, attribute) pairs of kafka-python this module relies on.
INTERNALS = (
    ("kafka.net.compat.KafkaNetClient", "_manager"),
    ("kafka.net.compat.KafkaNetClient", "_net"),
    ("kafka.net.manager.KafkaConnectionManager", "run"),
    ("kafka.net.manager.KafkaConnectionManager", "send"),
    ("kafka.net.manager.KafkaConnectionManager", "wait_for"),
    ("kafka.net.manager.KafkaConnectionManager", "cluster"),
    ("kafka.net.manager.KafkaConnectionManager", "_auth_failures"),
    ("kafka.net.manager.KafkaConnectionManager", "_backoff"),
    ("kafka.net.manager.KafkaConnectionManager", "reset_backoff"),
    ("kafka.net.selector.NetworkSelector", "sleep"),
    ("kafka.net.selector.NetworkSelector", "stop"),
    ("kafka.protocol.api_header.RequestHeader", "get_response_class"),
    ("kafka.protocol.api_message.ApiMessage", "with_header"),
    ("kafka.protocol.api_message.ApiMessage", "encode_header"),
    ("kafka.protocol.api_message.ApiMessage", "flexible_version_q"),
)
#: How much longer than a request's own timeout its answer is awaited (the request times out
#: on the connection first; this only guards against a lost callback).
AWAIT_MARGIN_MS = 1000

#: A request's frame: its size, before the header.
_FRAME = struct.Struct(">i").pack

#: One reply of :meth:`ProtocolClient.send_all`: (key, broker id, response or exception).
Reply = tuple[K, int, Any]


class ProtocolClient:
    """kafka-python's admin client for one cluster, reduced to what the families need."""

    def __init__(self, admin: Any, network: Any) -> None:
        self._admin = admin
        self._network = network
        self._closed = False

    @property
    def _manager(self) -> Any:
        """The connection manager, for ``bench/collect_bench.py``'s request counter only."""
        return self._network._manager

    @classmethod
    def connect(
        cls, config: dict[str, Any], *, login_failure: Callable[[], str | None] = lambda: None
    ) -> ProtocolClient:
        """Bootstrap (kafka-python does it in its constructor, retrying a refused login until
        ``bootstrap_timeout_ms``). On failure, raise KafkaUnavailable named after the login
        failure a connection recorded, or else ``login_failure()`` (another client's view),
        or else the exception, and stop the I/O thread the attempt started."""
        from kafka import KafkaAdminClient
        from kafka.net.compat import KafkaNetClient

        made: list[Any] = []

        def network_client(**configs: Any) -> Any:
            made.append(KafkaNetClient(**configs))
            return made[-1]

        try:
            admin = KafkaAdminClient(kafka_client=network_client, **config)
        except Exception as e:
            failures = [f for c in made for f in c._manager._auth_failures.values()]
            for c in made:  # as KafkaAdminClient.close() does: the client, then its I/O thread
                stop_network(c)
            error = error_name(failures[0]) if failures else error_name(e)
            if not failures:
                # kafka-python often reports a failed SASL exchange as a lost socket.
                error = login_failure() or error
            bootstrap = ",".join(config.get("bootstrap_servers", []))
            raise KafkaUnavailable(
                f"cannot bootstrap from {bootstrap}: {error}: {failures[0] if failures else e}", error=error
            ) from e
        return cls(admin, made[-1])

    def run(self, coro: Callable[..., Any], *args: Any) -> Any:
        """Run ``coro(*args)`` on the client's I/O thread; block until it returns or raises."""
        self._check_open()
        return self._network._manager.run(coro, *args)

    async def send_all(
        self, requests: Sequence[tuple[K, int | None, Any]], timeout_ms: int
    ) -> list[Reply[K]]:
        """Send every request at once (broker None: any broker), then await each answer.

        Returns (key, broker id, response or exception) in request order; a request that
        could not be sent, failed or timed out has its exception in place of a response.
        """
        self._check_open()  # closed under us: the cycle is being stopped
        manager = self._network._manager
        in_flight: list[tuple[K, int, Any]] = []
        for key, broker_id, request in requests:
            try:
                future = manager.send(request, node_id=broker_id, request_timeout_ms=timeout_ms)
            except Exception as e:  # unknown broker id, auth failure cached for the node
                manager.cluster.request_update()
                future = e
            in_flight.append((key, -1 if broker_id is None else broker_id, future))
        results: list[Reply[K]] = []
        for key, broker_id, future in in_flight:
            if isinstance(future, BaseException):
                results.append((key, broker_id, future))
                continue
            try:
                response = await manager.wait_for(future, timeout_ms + AWAIT_MARGIN_MS)
            except Exception as e:
                response = e
            results.append((key, broker_id, response))
        return results

    def forget_backoff(self) -> None:
        """Let the next request to any broker connect at once.

        After failed connection attempts kafka-python holds a node back for a growing delay
        (up to ``reconnect_backoff_max_ms``, plus 20% jitter), and a request sent meanwhile
        fails at once without trying. The daemon's cycle is the retry loop and its interval
        the backoff: a broker that came back between two cycles must be tried by the next
        one, not refused for seconds more."""
        self._check_open()
        manager = self._network._manager

        async def forget() -> None:  # on the I/O thread, which owns the table
            for node_id in list(manager._backoff):
                manager.reset_backoff(node_id)

        manager.run(forget)

    async def sleep(self, seconds: float) -> None:
        await self._network._net.sleep(seconds)

    def close(self) -> None:
        self._closed = True
        self._admin.close()

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaUnavailable("the admin client is closed")


class _StandIn:
    """A stand-in for one kafka-python request on the connection: the version the connection
    negotiates and the header it sets are the wrapped request's; everything else the
    connection asks (API key, name, min/max versions) is read from it too."""

    def __init__(self, request: Any) -> None:
        self._request = request

    @property
    def API_VERSION(self) -> Any:  # noqa: N802 - kafka-python's name
        return self._request.API_VERSION

    @API_VERSION.setter
    def API_VERSION(self, version: int) -> None:  # noqa: N802
        self._request.API_VERSION = version

    @property
    def header(self) -> Any:
        return self._request.header

    def with_header(self, *args: Any, **kwargs: Any) -> None:
        self._request.with_header(*args, **kwargs)

    def expect_response(self) -> bool:
        return bool(self._request.expect_response())

    def __getattr__(self, name: str) -> Any:  # API_KEY, name, min/max versions, fields
        return getattr(self._request, name)


class DecodedBy(_StandIn):
    """One kafka-python request whose response, in ``versions``, is handed to ``decode`` (the
    body's bytes, after the response header) instead of kafka-python's decoder: the request
    stands in for the wrapped one on the connection (which negotiates its version, adds the
    header and encodes it), and only its own header tells the connection's reader which
    decoder to use. ``exporter.kafka.wire`` reads OffsetFetch straight into columns this way;
    every other OffsetFetch of the process, kafka-python's own ``list_group_offsets``
    included, is decoded as kafka-python decodes it. ``decode`` raises ValueError on bytes it
    cannot read, which kafka-python reports as a protocol error of that request."""

    def __init__(self, request: Any, versions: range, decode: Callable[[bytes], Any]) -> None:
        super().__init__(request)
        self._versions = versions
        self._decode = decode

    @property
    def header(self) -> Any:
        header = self._request.header
        return None if header is None else _DecodingHeader(header, self._versions, self._decode)

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        return self._request.encode(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._request)


class EncodedBy(_StandIn):
    """A request whose body we write: it stands in for ``shell``, the same kafka-python
    request with empty arrays, on the connection. The connection negotiates the version
    (within ``shell``'s ``min_version`` and ``max_version``, which must lie in ``versions``)
    and sets the header on ``shell``; :meth:`encode` writes that header, then
    ``encode_body(version)``, then frames them, as kafka-python's own ``encode`` does. The
    response is decoded by kafka-python, as for ``shell``. ``exporter.kafka.wire`` writes
    ListOffsets this way."""

    def __init__(self, shell: Any, versions: range, encode_body: Callable[[int], bytes]) -> None:
        super().__init__(shell)
        self._versions = versions
        self._encode_body = encode_body

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        if version is not None:
            self.API_VERSION = version
        version = self._request.API_VERSION
        if version not in self._versions:
            raise ValueError(f"{type(self._request).__name__} v{version} is not written here")
        data = self._encode_body(version)
        if header:
            data = self._request.encode_header(flexible=self._request.flexible_version_q(version)) + data
        if framed:
            data = _FRAME(len(data)) + data
        return data

    def __repr__(self) -> str:
        return f"{type(self._request).__name__}(v{self._request.API_VERSION}, body written by the exporter)"


class _DecodingHeader:
    """A request header whose response class decodes with our function (in ``versions``)."""

    def __init__(self, header: Any, versions: range, decode: Callable[[bytes], Any]) -> None:
        self._header = header
        self._versions = versions
        self._decode = decode

    def get_response_class(self) -> Any:
        versioned = self._header.get_response_class()
        if versioned is None or self._header.request_api_version not in self._versions:
            return versioned
        return _DecodingVersion(versioned, self._decode)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._header, name)


class _DecodingVersion:
    def __init__(self, versioned: Any, decode: Callable[[bytes], Any]) -> None:
        self.versioned = versioned
        self.decode_body = decode

    def parse_header(self, data: Any) -> Any:
        return self.versioned.parse_header(data)

    def decode(self, data: Any) -> Any:
        return self.decode_body(data.read() if hasattr(data, "read") else bytes(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.versioned, name)


def stop_network(network_client: Any) -> None:
    """Close a network client that no admin client owns, and stop its I/O thread."""
    network_client.close()
    network_client._net.stop()


def missing_internals() -> list[str]:
    """The entries of :data:`INTERNALS` the installed kafka-python lacks (empty: all there).

    Instance attributes are looked up on an instance made without connecting anywhere, class
    attributes on the class."""
    import importlib

    from kafka.net.compat import KafkaNetClient

    probe = KafkaNetClient(bootstrap_servers=["127.0.0.1:1"])
    try:
        objects: dict[str, Any] = {
            "kafka.net.compat.KafkaNetClient": probe,
            "kafka.net.manager.KafkaConnectionManager": getattr(probe, "_manager", None),
            "kafka.net.selector.NetworkSelector": getattr(probe, "_net", None),
            "kafka.protocol.api_header.RequestHeader": importlib.import_module(
                "kafka.protocol.api_header"
            ).RequestHeader,
            "kafka.protocol.api_message.ApiMessage": importlib.import_module(
                "kafka.protocol.api_message"
            ).ApiMessage,
        }
        missing = []
        for path, attribute in INTERNALS:
            module, _, name = path.rpartition(".")
            cls = getattr(importlib.import_module(module), name, None)
            if cls is None or not (objects[path] is cls or isinstance(objects[path], cls)):
                missing.append(path)
            elif not hasattr(objects[path], attribute):
                missing.append(f"{path}.{attribute}")
        return missing
    finally:
        stop_network(probe)
