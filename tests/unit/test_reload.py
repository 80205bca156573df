"""SIGHUP reload: the daemon switches to a new validated config (new jobs for the new
clusters, the HTTP server moved only when the listen address changed), keeps the state of
the clusters it keeps, and an invalid file or an unusable address changes nothing.

The daemon runs for real (scheduler, HTTP) against an unreachable cluster; the pipeline is a
stand-in that never starts Spark (no cycle reaches it)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.cli import SignalStop, _reload, load_run_config
from exporter.config import Config, parse_config
from exporter.daemon import Daemon, PipelineRunner
from exporter.daemon.http import MetricsServer
from exporter.daemon.listen import ListenError
from exporter.metrics.state import ClusterState


class NoSpark(PipelineRunner):
    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(port: int, *clusters: str, **top: object) -> Config:
    return parse_config(
        {
            "clusters": [
                {"name": c, "bootstrap_servers": "127.0.0.1:1", "request_timeout": "1s", "interval": "1h"}
                for c in clusters
            ],
            "web": {"listen_address": f"127.0.0.1:{port}"},
            **top,
        },
        env={},
    )


def get(port: int, path: str = "/metrics") -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return int(r.status)


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    first = config(free_port(), "a")
    d = Daemon(first, pipeline=NoSpark(first.spark, first.pipeline))
    d.start()
    yield d
    d.stop()


def test_reload_swaps_clusters_and_moves_http_keeping_kept_state(daemon: Daemon) -> None:
    old_port = daemon.port
    daemon.store.put(ClusterState(cluster="a", cycles_complete=3))
    new_port = free_port()
    daemon.reload(config(new_port, "a", "b", pipeline={"hanging_confirm_cycles": 3}))
    assert [j.cluster.name for j in daemon.jobs] == ["a", "b"]
    assert daemon.store.get("a").cycles_complete == 3
    assert daemon.store.get("b").cycles_complete == 0
    assert daemon.pipeline.settings.hanging_confirm_cycles == 3
    assert daemon.port == new_port
    assert get(new_port) == 200
    with pytest.raises(urllib.error.URLError):
        get(old_port)


def test_reload_without_address_change_keeps_the_server(daemon: Daemon) -> None:
    server = daemon._server
    daemon.reload(config(daemon.port, "b"))
    assert daemon._server is server
    assert [j.cluster.name for j in daemon.jobs] == ["b"]
    with pytest.raises(KeyError):
        daemon.store.get("a")
    assert get(daemon.port) == 200


def test_reload_to_a_taken_address_changes_nothing(daemon: Daemon) -> None:
    before = daemon.config
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with pytest.raises(ListenError, match="Address already in use"):
            daemon.reload(config(taken.getsockname()[1], "a", "b"))
    finally:
        taken.close()
    assert daemon.config is before
    assert [j.cluster.name for j in daemon.jobs] == ["a"]
    assert get(daemon.port) == 200


def test_reload_keeps_the_running_spark_settings(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    daemon.reload(config(daemon.port, "a", spark={"master": "local[1]"}))
    assert daemon.config.spark.master == "local[2]"
    assert "restart the exporter to apply it" in caplog.text


def test_sighup_with_an_invalid_file_keeps_the_old_config(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import argparse

    path = tmp_path / "c.yml"
    path.write_text("clusters: [{name: a, bootstrap_servers: 'h:1', interval: .inf}]\n")
    args = argparse.Namespace(config_file=str(path), listen_address=None, log_level=None)
    before = daemon.config
    with caplog.at_level(logging.ERROR):
        _reload(args, daemon)
    assert daemon.config is before
    assert "reload failed, still running on the previous configuration" in caplog.text
    assert "clusters[0].interval: must be a finite duration" in caplog.text

    path.write_text(
        f"clusters: [{{name: c, bootstrap_servers: 'h:1'}}]\n"
        f"web: {{listen_address: '127.0.0.1:{daemon.port}'}}\n"
    )
    _reload(args, daemon)
    assert [j.cluster.name for j in daemon.jobs] == ["c"]
    assert load_run_config(str(path)).clusters == daemon.config.clusters


def test_sighup_asks_for_a_reload_and_sigterm_for_a_stop() -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        signals = SignalStop()
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.wait(poll_s=0.01) is False
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.wait(poll_s=0.01) is True
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def test_ipv6_loopback_listen_address_binds() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this kernel")
    try:
        server = MetricsServer(
            CollectorRegistry(),
            host="::1",
            port=0,
            health=lambda: (True, "ok"),
            ready=lambda: (True, "ready"),
        )
    except OSError as e:  # IPv6 disabled on loopback
        pytest.skip(str(e))
    try:
        server.start()
        assert server.port > 0
    finally:
        server.stop()
