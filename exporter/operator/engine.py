"""The engine a CLI command classifies on: warm when one is reachable, else cheap to start.

``find-hanging`` and ``abort`` run the same ``compute`` as the daemon. Starting a local Spark
for one command costs seconds; an exporter running on the same host (``kubectl exec`` into
its pod) can serve its warm embedded Spark on a loopback Spark Connect endpoint
(``spark.connect_server_port``), and a shared Connect server can be configured
(``spark.connect_url`` or the standard ``SPARK_REMOTE``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from exporter.config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Where an exporter's embedded Spark serves its warm engine by default (Spark Connect's port).
DEFAULT_WARM_ENGINE_PORT = 15002
#: Environment variable naming another loopback port of that endpoint (``0``: do not probe).
WARM_ENGINE_PORT_ENV = "KAFKA_TXN_EXPORTER_SPARK_CONNECT_PORT"


@contextmanager
def cli_engine(spark_config: SparkConfig | None = None) -> Iterator[SparkSession]:
    """The engine for one command, the cheapest reachable one first:

    1. the process's own classic session (a test's, the daemon's);
    2. a configured Spark Connect server: ``spark_config.connect_url``, else ``SPARK_REMOTE``;
    3. a warm engine on this host: an exporter's embedded Spark serving Spark Connect on
       ``127.0.0.1:<port>`` (``spark_config.connect_server_port``, else
       ``$KAFKA_TXN_EXPORTER_SPARK_CONNECT_PORT``, else 15002), used when it answers;
    4. else a local session tuned to start fast.

    The engine is found (or started) in the background while the command collects from Kafka:
    the session is a proxy that waits for it on first use.

    The classification is the same everywhere: one ``compute``, only the engine differs.
    """
    from pyspark import SparkContext

    config = spark_config or SparkConfig()
    if SparkContext._active_spark_context is not None:
        # A session of this process (getActiveSession is per thread: a session started by
        # another thread is reused by getOrCreate and must not be stopped here).
        yield spark_session_of_process()
        return
    remote = _connect_target(config)
    local = replace(config, master="local[2]", connect_url=None, app_name="kafka-txn-exporter-cli")
    lazy = _LazySession(lambda: _first_engine(config, remote, local))
    try:
        yield cast("SparkSession", lazy)
    finally:
        lazy.stop()


def _first_engine(config: SparkConfig, remote: str | None, local: SparkConfig) -> tuple[SparkSession, bool]:
    """The Connect engine at ``remote`` when it answers, else a local session; and whether it
    is a Connect client (stopping it ends this client's session, not the server)."""
    from exporter.pipeline.session import spark_session

    if remote is not None:
        session = _connect_session(config, remote)
        if session is not None:
            return session, True
    return spark_session(local, short_lived=True), False


def spark_session_of_process() -> SparkSession:
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    return session if session is not None else SparkSession.builder.getOrCreate()


def _connect_target(config: SparkConfig) -> str | None:
    """The Connect URL to try: configured, from ``SPARK_REMOTE``, or a local warm engine."""
    from exporter.pipeline.session import connect_port_answers

    if config.connect_url:
        return config.connect_url
    if os.environ.get("SPARK_REMOTE", "").startswith("sc://"):
        return os.environ["SPARK_REMOTE"]
    port = config.connect_server_port
    if port is None:
        raw = os.environ.get(WARM_ENGINE_PORT_ENV, "")
        port = int(raw) if raw.isdigit() else DEFAULT_WARM_ENGINE_PORT
    if port and connect_port_answers(port):
        return f"sc://127.0.0.1:{port}"
    return None


def _connect_session(config: SparkConfig, url: str) -> SparkSession | None:
    """A Connect client session on ``url`` that answered a trivial query, else None (the
    caller falls back to a local session). Never prints the URL's parameters (a token)."""
    from exporter.pipeline.session import spark_session

    where = url.split("/;", 1)[0]
    try:
        session = spark_session(replace(config, connect_url=url))
        session.range(1).collect()
    except Exception as e:  # not a Connect server, no client libraries, refused
        log.info("no Spark Connect engine at %s (%s): starting a local Spark", where, type(e).__name__)
        return None
    log.info("using the Spark Connect engine at %s", where)
    return session


def _quietly_stop(session: SparkSession) -> None:
    try:
        session.stop()  # a Connect client: ends this client's session, not the server
    except Exception as e:
        log.debug("closing the Spark Connect session: %s", e)


class _LazySession:
    """The command's engine, found or started in the background at once; attribute access
    waits for it. The command collects from Kafka meanwhile, so the Connect client's import
    and handshake, or the local JVM's start, are off the critical path."""

    def __init__(self, start: Callable[[], tuple[SparkSession, bool]]) -> None:
        self._start_engine = start
        self._session: SparkSession | None = None
        self._remote = False
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self._session, self._remote = self._start_engine()
        except BaseException as e:  # re-raised on first use
            self._error = e
        finally:
            self._ready.set()

    def _wait(self) -> SparkSession:
        self._ready.wait()
        if self._error is not None:
            raise self._error
        assert self._session is not None
        return self._session

    def wait_ready(self) -> None:
        """Wait for the engine (raises what its start raised)."""
        self._wait()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wait(), name)

    def stop(self) -> None:
        """Stop the session if it started; an engine still starting (a command that failed
        before it needed Spark) is not waited for: a local JVM exits with this process (end
        of its stdin), a Connect client's session ends on the server's timeout."""
        from exporter.pipeline.session import stop

        if not self._ready.is_set() or self._session is None:
            return
        if self._remote:
            _quietly_stop(self._session)
        else:
            stop(self._session)
