"""The Spark Connect server the tests start: the one in the pyspark wheel
(``SparkConnectServer`` through ``spark-submit``) on loopback, a subprocess of the test, with
the server's side of the exporter's small-data settings. Used by
tests/integration/test_spark_connect.py and tests/image (the thin image as its client).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0

#: The server's side of the deployment: what session.LOCAL_DEFAULTS sets for the embedded
#: session (static settings belong to the Connect server, see session_conf).
SERVER_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.catalogImplementation": "in-memory",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "2",
    "spark.sql.adaptive.enabled": "false",
    "spark.buffer.pageSize": "1m",
    "spark.connect.grpc.binding.address": "127.0.0.1",
}
#: The server logs warnings, and the Connect service's own start-up lines, to its log file.
SERVER_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss,SSS} %p %c{1}: %m%n
logger.connect.name = org.apache.spark.sql.connect.service
logger.connect.level = info
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"(no server log: {e})"
    return "\n".join(text.splitlines()[-lines:])


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (spark-submit's launcher and the JVM), SIGKILL it
    if it has not exited in time, and SIGKILL whatever is left of the group: no JVM outlives
    the test. The group is the one the server was started in (``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def connect_server(work: Path) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (local[2], 512m driver, no UI) while in the block,
    its URL yielded; ``work`` holds its log, scratch and warehouse."""
    log_path = work / "server.log"
    log4j = work / "log4j2.properties"
    log4j.write_text(SERVER_LOG4J2)
    port = free_port()
    conf = {
        **SERVER_CONF,
        "spark.connect.grpc.binding.port": str(port),
        "spark.local.dir": str(work / "local"),
        "spark.sql.warehouse.dir": str(work / "warehouse"),
    }
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        SERVER_CLASS,
        "--name",
        "kafka-txn-exporter-connect-test",
        "--master",
        "local[2]",
        "--driver-memory",
        "512m",
        "--driver-java-options",
        f"-Dlog4j2.configurationFile={log4j} -Djava.io.tmpdir={work}",
        *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")),
        "spark-internal",
    ]
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONNECT_MODE": "0",  # as sbin/start-connect-server.sh: this is the server
    }
    env.pop("SPARK_REMOTE", None)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_answers(port):
            if proc.poll() is not None:
                pytest.fail(f"Spark Connect server exited with {proc.returncode}:\n{log_tail(log_path)}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"Spark Connect server did not answer on 127.0.0.1:{port} within "
                    f"{START_TIMEOUT_S:.0f} s:\n{log_tail(log_path)}"
                )
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_server(proc)


def start_client_process(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m module args`` in a process of its own (a remote engine's client: one engine
    per process), the repository its working directory, without the environment that would
    make PySpark choose an engine for it."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE", "PYSPARK_SUBMIT_ARGS")
    }
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parents[1],
        env={**clean, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def client_document(client: subprocess.Popen[str], timeout_s: float, what: str) -> dict[str, Any]:
    """The JSON document on the client's last line; fails the test (and ends the client) when
    it does not finish within ``timeout_s`` or fails."""
    try:
        out, err = client.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        client.kill()
        out, err = client.communicate()
        pytest.fail(f"{what} did not finish within {timeout_s:.0f} s:\n{err[-6000:]}")
    assert client.returncode == 0, f"{what} failed:\n{out}\n{err[-6000:]}"
    document: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return document
