"""The README's demo command works: hanging transaction on /metrics, Ctrl-C stops it all."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from testbed.broker import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def _java_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_demo_shows_the_hanging_transaction_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "demo.log"
    with log_path.open("w") as log_file:
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.demo",
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--interval",
                "2s",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 240
            text = ""
            while "kafka_txn_hanging_transaction_info{" not in text:
                assert demo.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(2)
                text = _metrics(port)
            assert 'topic="orders"' in text
            assert 'kafka_txn_exporter_up{kafka_cluster="demo"} 1.0' in text
            shown = log_path.read_text()
            assert f"The exporter serves http://127.0.0.1:{port}/metrics and" in shown
            # One status line per cycle, without curl; the next steps once it is found.
            assert re.search(r"\d\d:\d\d:\d\d cycle 1 \(", shown), shown
            deadline = time.monotonic() + 60
            while "Found the hanging transaction" not in shown and time.monotonic() < deadline:
                time.sleep(1)
                shown = log_path.read_text()
            assert re.search(r"cycle \d+ \([^)]*\): HANGING orders-1 offset \d+", shown), shown
            assert "Found the hanging transaction" in shown
            # Nothing but the demo's own lines: no library, JVM or Spark banner.
            for noise in ("apscheduler", "Using incubator modules", "Setting default log level", "INFO"):
                assert noise not in shown, noise
            children = _java_children(demo.pid)
            demo.send_signal(signal.SIGINT)
            time.sleep(0.05)
            demo.send_signal(signal.SIGINT)  # a second Ctrl-C while stopping
            assert demo.wait(timeout=60) == 0, log_path.read_text()[-3000:]
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    time.sleep(1)
    alive = [pid for pid in children if _running(pid)]
    assert not alive, f"processes left behind by the demo: {alive}"
