"""``cluster_files``: a directory of cluster files, one cluster each, beside ``clusters:``.
Read with the config file and again on SIGHUP; every error names its file and its key;
check-config validates them."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import _reload, main
from exporter.config import ConfigError, load_config
from exporter.daemon import Daemon
from tests.unit.test_reload import NoSpark, free_port


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    clusters = tmp_path / "clusters.d"
    write(clusters / "prod.yml", "bootstrap_servers: 127.0.0.1:1\ninterval: 1m\nrequest_timeout: 1s\n")
    write(clusters / "staging.yaml", "name: stage\nbootstrap_servers: 127.0.0.2:1\nrequest_timeout: 1s\n")
    return clusters


def config_file(tmp_path: Path, body: str = "") -> Path:
    return write(tmp_path / "config.yml", "cluster_files: clusters.d\n" + body)


def test_each_file_is_a_cluster_after_those_of_the_clusters_list(tmp_path: Path, fleet_dir: Path) -> None:
    write(fleet_dir / "README.md", "not a cluster")
    write(fleet_dir / ".hidden.yml", "not: [a cluster")
    (fleet_dir / "sub.yml").mkdir()
    path = config_file(tmp_path, "clusters: [{name: local, bootstrap_servers: 'h:1'}]\n")
    config = load_config(path, env={})
    assert [c.name for c in config.clusters] == ["local", "prod", "stage"]
    assert config.clusters[1].interval_ms == 60_000
    assert config.clusters[2].bootstrap_servers == "127.0.0.2:1"
    assert config.cluster_files == "clusters.d"


def test_a_configmap_mount_is_read_through_its_links_and_its_dot_entries_are_not(tmp_path: Path) -> None:
    """Kubernetes mounts a ConfigMap as ``..data -> ..2024_01_01_00_00_00.1`` and one link per
    key (``prod.yml -> ..data/prod.yml``)."""
    clusters = tmp_path / "clusters.d"
    version = clusters / "..2024_01_01_00_00_00.1"
    write(version / "prod.yml", "bootstrap_servers: prod:9092\n")
    os.symlink(version.name, clusters / "..data")
    os.symlink("..data/prod.yml", clusters / "prod.yml")
    config = load_config(config_file(tmp_path), env={})
    assert [c.name for c in config.clusters] == ["prod"]


def test_every_problem_names_its_file_and_key(tmp_path: Path, fleet_dir: Path) -> None:
    write(fleet_dir / "bad.yml", "bootstrap_servers: nohost\ncolour: blue\nkafka: {sasl.password: hunter2}\n")
    write(fleet_dir / "broken.yml", "bootstrap_servers: [h:1\n")
    write(fleet_dir / "dup.yml", "bootstrap_servers: h:1\nname: prod\n")
    write(fleet_dir / "list.yml", "- a\n- b\n")
    with pytest.raises(ConfigError) as info:
        load_config(config_file(tmp_path, "clusters: [{name: stage, bootstrap_servers: 'h:1'}]\n"), env={})
    text = "\n".join(info.value.problems)
    bad, broken = fleet_dir / "bad.yml", fleet_dir / "broken.yml"
    assert f"{bad}: bootstrap_servers: 'nohost' must be HOST:PORT" in text
    assert f"{bad}: colour: unknown key" in text
    assert f"{bad}: kafka.sasl.password: a literal secret in the file is refused" in text
    assert "hunter2" not in text
    assert f"{broken}: not valid YAML: line 2" in text
    assert f"{fleet_dir / 'list.yml'}: must be a mapping" in text
    assert (
        f"{fleet_dir / 'prod.yml'}: cluster name 'prod' is used more than once (also {fleet_dir / 'dup.yml'})"
        in (text)
    )
    assert (
        f"{fleet_dir / 'staging.yaml'}: cluster name 'stage' is used more than once (also clusters[0])"
        in text
    )


def test_relative_paths_in_a_cluster_file_are_relative_to_its_directory(
    tmp_path: Path, fleet_dir: Path
) -> None:
    write(fleet_dir / "secrets" / "password", "s3cret\n")
    write(
        fleet_dir / "secure.yml",
        "bootstrap_servers: secure:9093\n"
        "kafka: {security.protocol: SASL_SSL, sasl.mechanism: PLAIN, sasl.username: exporter}\n"
        "kafka_files: {sasl.password: secrets/password}\n",
    )
    config = load_config(config_file(tmp_path), env={})
    secure = next(c for c in config.clusters if c.name == "secure")
    assert secure.kafka["sasl.password"] == "s3cret"


def test_a_missing_directory_or_no_cluster_at_all_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(config_file(tmp_path), env={})
    assert info.value.problems == [
        f"cluster_files: cannot read the directory {tmp_path / 'clusters.d'}: No such file or directory"
    ]
    (tmp_path / "clusters.d").mkdir()
    with pytest.raises(ConfigError) as info:
        load_config(config_file(tmp_path), env={})
    assert info.value.problems == [
        "clusters: required: a list of at least one cluster (or cluster_files: a directory of cluster files)"
    ]


def test_check_config_validates_the_cluster_files(
    tmp_path: Path, fleet_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path)
    assert main(["check-config", "--config.file", str(path)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"{path}: ok (2 cluster(s): prod, stage, cluster files from clusters.d)"
    )
    write(fleet_dir / "late.yml", "bootstrap_servers: h:1\ninterval: 5s\nrequest_timeout: 10s\n")
    assert main(["check-config", "--config.file", str(path)]) == 2
    assert f"{fleet_dir / 'late.yml'}: request_timeout: must be shorter than the interval" in (
        capsys.readouterr().err
    )


@pytest.fixture
def daemon(tmp_path: Path, fleet_dir: Path) -> Iterator[tuple[Daemon, argparse.Namespace]]:
    path = config_file(tmp_path, f"web: {{listen_address: '127.0.0.1:{free_port()}'}}\n")
    config = load_config(path, env={})
    d = Daemon(config, pipeline=NoSpark(config.spark, config.pipeline))
    d.start()
    yield d, argparse.Namespace(config_file=str(path), listen_address=None, log_level=None)
    d.stop()


def test_sighup_reads_the_directory_again(
    daemon: tuple[Daemon, argparse.Namespace], fleet_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d, args = daemon
    assert [j.cluster.name for j in d.jobs] == ["prod", "stage"]
    write(fleet_dir / "new.yml", "bootstrap_servers: 127.0.0.3:1\nrequest_timeout: 1s\n")
    write(fleet_dir / "bad.yml", "bootstrap_servers: nohost\n")
    with caplog.at_level(logging.ERROR):
        _reload(args, d)  # refused: the daemon keeps running on what it had
    assert [j.cluster.name for j in d.jobs] == ["prod", "stage"]
    assert f"{fleet_dir / 'bad.yml'}: bootstrap_servers: 'nohost' must be HOST:PORT" in caplog.text

    (fleet_dir / "bad.yml").unlink()
    (fleet_dir / "staging.yaml").unlink()
    _reload(args, d)
    assert [j.cluster.name for j in d.jobs] == ["new", "prod"]
