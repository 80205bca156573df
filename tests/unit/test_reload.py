"""SIGHUP reload: the daemon switches to a new validated config (new jobs for the new
clusters, the HTTP server moved only when the listen address changed), keeps the state of
the clusters it keeps, and an invalid file or an unusable address changes nothing.

The daemon runs for real (scheduler, HTTP) against an unreachable cluster; the pipeline is a
stand-in that never starts Spark (no cycle reaches it)."""

from __future__ import annotations

import argparse
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
    def begin_start(self) -> None:
        pass

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


# --- a reload is total: whatever fails, the daemon keeps running as it was -------------------


def _args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        config_file=str(path), listen_address=None, log_level=None, web_config_file=None
    )


def _valid(daemon: Daemon, *clusters: str, web_file: Path | None = None) -> str:
    web = f", config_file: '{web_file}'" if web_file else ""
    items = ", ".join(
        f"{{name: {c}, bootstrap_servers: 'h:1', request_timeout: 1s, interval: 1h}}" for c in clusters
    )
    return f"clusters: [{items}]\nweb: {{listen_address: '127.0.0.1:{daemon.port}'{web}}}\n"


def _reload_fails(daemon: Daemon, path: Path, caplog: pytest.LogCaptureFixture) -> str:
    """SIGHUP's reload with ``path``: nothing changes, one error line is logged; its text."""
    before, jobs = daemon.config, daemon.jobs
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        _reload(_args(path), daemon)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0].getMessage()
    assert "\n" not in line
    assert line.startswith("reload failed, still running on the previous configuration: ")
    assert daemon.config is before and daemon.jobs is jobs
    assert get(daemon.port) == 200
    return line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"clusters: [{name: a, bootstrap_servers: 'h:1'\n", "not valid YAML: line 2, column 1"),
        ("clusters: [{name: caf\xe9}]\n".encode("latin-1"), "not UTF-8 text"),
        (
            b"clusters: [{name: a, bootstrap_servers: 'h:1', interval: 1" + b"0" * 400 + b"}]\n",
            "clusters[0].interval: is too large for a duration",
        ),
        (
            b"clusters: [{name: a, bootstrap_servers: 'h:1', interval: .inf}]\nlog: {level: loud}\n",
            "clusters[0].interval: must be a finite duration (got infinity or NaN); log.level: 'loud'",
        ),
        (
            b"on: 1\nextra: 2\nclusters: [{name: a, bootstrap_servers: 'h:1', off: 3, colour: 4}]\n",
            "True: unknown key",
        ),
        (b"\x00\x01binary\xff", "not UTF-8 text"),
    ],
    ids=[
        "yaml-syntax",
        "not-utf8",
        "huge-integer-duration",
        "invalid-values",
        "yaml11-boolean-keys",
        "binary",
    ],
)
def test_a_config_file_that_cannot_be_used_keeps_the_running_config(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, expected: str
) -> None:
    path = tmp_path / "config.yml"
    path.write_bytes(content)
    line = _reload_fails(daemon, path, caplog)
    assert f"{path}: " in line and expected in line


def test_a_config_file_that_cannot_be_read_keeps_the_running_config(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    line = _reload_fails(daemon, tmp_path / "gone.yml", caplog)
    assert f"{tmp_path / 'gone.yml'}: cannot read: No such file or directory" in line
    line = _reload_fails(daemon, tmp_path, caplog)  # a directory
    assert f"{tmp_path}: cannot read: Is a directory" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"basic_auth_users: {prometheus: 'pasted-secret-0001\n", "not valid YAML: line "),
        ("basic_auth_users: {jos\xe9: x}\n".encode("latin-1"), "not UTF-8 text"),
        (b"on: 1\nextra: 2\n", "True: unknown key"),
        (
            b"basic_auth_users: {prometheus: pasted-secret-0001}\n",
            "basic_auth_users.prometheus: not a bcrypt hash",
        ),
        (
            b"tls_server_config: {cert_file: /nonexistent.crt, key_file: /nonexistent.key}\n",
            "tls_server_config.cert_file: /nonexistent.crt is not a readable file",
        ),
    ],
    ids=["yaml-syntax", "not-utf8", "yaml11-boolean-keys", "not-a-hash", "missing-certificate"],
)
def test_a_web_config_file_that_cannot_be_used_keeps_the_running_config(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, expected: str
) -> None:
    web = tmp_path / "web.yml"
    web.write_bytes(content)
    path = tmp_path / "config.yml"
    path.write_text(_valid(daemon, "a", "b", web_file=web))
    line = _reload_fails(daemon, path, caplog)
    assert str(web) in line and expected in line
    assert "pasted-secret" not in caplog.text


def test_an_address_that_cannot_be_bound_keeps_the_running_config(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        path = tmp_path / "config.yml"
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        clusters = "clusters: [{name: b, bootstrap_servers: 'h:1'}]"
        path.write_text(f"{clusters}\nweb: {{listen_address: '{address}'}}\n")
        line = _reload_fails(daemon, path, caplog)
    finally:
        taken.close()
    assert "(web.listen_address): Address already in use" in line


def test_an_unexpected_failure_keeps_the_running_config_and_the_trace_is_debug_only(
    daemon: Daemon, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Daemon, config: Config) -> None:
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(Daemon, "_replace_jobs", broken)
    path = tmp_path / "config.yml"
    path.write_text(_valid(daemon, "b"))
    line = _reload_fails(daemon, path, caplog)
    assert f"{path}: unexpected RuntimeError: something nobody expected" in line
    traced = [r for r in caplog.records if r.exc_info]
    assert traced and all(r.levelno == logging.DEBUG for r in traced)


def test_the_web_config_is_reloaded_with_the_rest(daemon: Daemon, tmp_path: Path) -> None:
    """Users are read again on reload, also when the file name did not change."""
    import base64

    import bcrypt

    def status(password: str) -> int:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{daemon.port}/metrics", headers={"Authorization": f"Basic {token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    web = tmp_path / "web.yml"
    path = tmp_path / "config.yml"
    path.write_text(_valid(daemon, "a", web_file=web))
    for password in ("first-password", "second-password"):
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
        web.write_text(f"basic_auth_users: {{prometheus: '{hashed}'}}\n")
        _reload(_args(path), daemon)
        assert status(password) == 200
    assert status("first-password") == 401
    assert daemon.web_settings.source == str(web)
