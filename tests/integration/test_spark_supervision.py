"""The daemon survives its Spark JVM dying or hanging (real broker, real daemon, real JVM).

One daemon runs on the command line against the single-node test-bed broker, with a short
interval, a pipeline deadline and ``unhealthy_after_intervals: 1``. Its embedded driver JVM
(the daemon's ``java`` child) is then

1. killed (SIGKILL): the daemon tears the session down, starts a new JVM, cycles complete
   again; ``/healthz`` answers 503 meanwhile and 200 after;
2. paused (SIGSTOP: the JVM accepts nothing and never answers): the cycle in flight passes
   its deadline, the liveness probe gets no answer, the paused JVM is killed by pid and a new
   one started; ``/healthz`` 503 then 200;
3. paused again, then the daemon gets SIGTERM: it exits within 30 s (a Kubernetes grace
   period) and leaves no JVM behind.

No timing is asserted beyond those bounds; waits are generous for a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.broker import KafkaCluster, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
#: A JVM start plus a cold first run on a loaded shared 2-core machine can take many minutes.
RECOVERY_WAIT_S = 900.0
STOP_BOUND_S = 30.0


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def java_children(pid: int) -> list[int]:
    """Live (not zombie) ``java`` children of ``pid``: the daemon's embedded driver JVM."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z" and (entry / "comm").read_text().strip() == "java":
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@dataclass
class RunningDaemon:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    health_seen: list[int] = field(default_factory=list)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def complete_cycles(self) -> int:
        status, text = http_get(f"http://127.0.0.1:{self.port}/metrics")
        assert status == 200
        total = 0.0
        for line in text.splitlines():
            if line.startswith("kafka_txn_exporter_cycles_total{") and 'result="complete"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def healthz(self) -> int:
        status, _ = http_get(f"http://127.0.0.1:{self.port}/healthz")
        self.health_seen.append(status)
        return status

    def wait_for(self, what: str, condition: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert self.proc.poll() is None, f"daemon exited while waiting for {what}:\n{self.log_tail()}"
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s:\n{self.log_tail()}"
            time.sleep(0.5)

    def jvm(self) -> int:
        """The one live driver JVM (waits for it)."""
        found: list[int] = []

        def one() -> bool:
            found[:] = java_children(self.proc.pid)
            return len(found) == 1

        self.wait_for("driver JVM", one, RECOVERY_WAIT_S)
        return found[0]

    def recovers_from(self, old_jvm: int) -> None:
        """A new JVM replaces ``old_jvm``, /healthz goes 503 (no pipeline success for an
        interval) then 200, and a cycle completes on the new session."""
        before = self.complete_cycles()
        self.health_seen.clear()
        self.wait_for("/healthz 503", lambda: self.healthz() == 503, RECOVERY_WAIT_S)
        self.wait_for(
            "a new driver JVM", lambda: bool(set(java_children(self.proc.pid)) - {old_jvm}), RECOVERY_WAIT_S
        )
        self.wait_for(
            "a complete cycle on the new session", lambda: self.complete_cycles() > before, RECOVERY_WAIT_S
        )
        self.wait_for("/healthz 200", lambda: self.healthz() == 200, RECOVERY_WAIT_S)
        assert process_state(old_jvm) in (None, "Z"), "the old JVM must be gone"
        first_bad = self.health_seen.index(503)
        assert 200 in self.health_seen[first_bad:]


@pytest.fixture
def daemon(kafka: KafkaCluster, tmp_path: Path) -> Iterator[RunningDaemon]:
    port = free_port()
    config = tmp_path / "config.yml"
    config.write_text(f"""
web: {{listen_address: "127.0.0.1:{port}"}}
spark:
  local_dir: "{tmp_path / "spark"}"
  pipeline_timeout: 60s
  start_timeout: 900s
  unhealthy_after_intervals: 1
clusters:
  - name: test
    bootstrap_servers: "{kafka.bootstrap_servers}"
    interval: 3s
    request_timeout: 2s
    kafka: {{client.id: "spark-supervision-test"}}
""")
    log_path = tmp_path / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from exporter.cli import main; sys.exit(main())",
                "run",
                "--config.file",
                str(config),
            ],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    running = RunningDaemon(proc, port, log_path)
    try:
        running.wait_for("/readyz 200", lambda: _ready(port), RECOVERY_WAIT_S)
        yield running
    finally:
        jvms = java_children(proc.pid)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in jvms:  # never leave a (paused) JVM behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _ready(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    except OSError:
        return False


def test_daemon_survives_its_spark_jvm_killed_and_paused_and_stops_while_paused(
    daemon: RunningDaemon,
) -> None:
    assert daemon.healthz() == 200

    # 1. Killed: the next pipeline call fails, the session is torn down and rebuilt.
    killed = daemon.jvm()
    os.kill(killed, signal.SIGKILL)
    daemon.recovers_from(killed)

    # 2. Paused: the call in flight passes its deadline, the probe gets no answer, the JVM
    #    is killed by pid (SIGKILL ends a stopped process too) and replaced.
    paused = daemon.jvm()
    os.kill(paused, signal.SIGSTOP)
    daemon.recovers_from(paused)
    log = daemon.log_path.read_text()
    assert "does not answer" in log
    assert re.search(r"killing driver JVM pid \d+", log)

    # 3. Paused again, then SIGTERM: out within a Kubernetes grace period, no JVM left.
    paused = daemon.jvm()
    os.kill(paused, signal.SIGSTOP)
    time.sleep(1)
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=STOP_BOUND_S) == 0, daemon.log_tail()
    time.sleep(0.5)
    assert process_state(paused) in (None, "Z"), "the paused JVM must not outlive the daemon"
