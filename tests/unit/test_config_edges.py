"""Validation is the contract: every key of the config file, given each edge value (0, negative,
2^31, 2^63, 10^400, NaN, infinities, empty, unicode, NUL, a lone surrogate, the wrong type) and
the ends of its own range (and one step past them), is either refused by ``check-config`` with
exit 2 naming the key, or accepted; and what is accepted runs: the daemon is built on it, and
the pipeline (``exporter.pipeline.compute.compute``, with the consumer-group family) completes
two cycles on a fixture snapshot with group offsets for every distinct pipeline input.

The keys are read from the config model's own declarations (``exporter.config.model``), so a
new key is covered without editing this file; the parsed sections (groups, history,
attribution) are listed with their own ranges."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pyspark.sql import SparkSession

from exporter.cli import main
from exporter.config import CONFIG, Config, ConfigError, SparkConfig, load_config
from exporter.config.groups import GROUP_LIMITS, AttributionRule, GroupsConfig
from exporter.config.history import DAY_MS, MAX_RETENTION_MS
from exporter.config.keys import Duration, Integer, Items, Kind, Nested, Section
from exporter.daemon import Daemon, PipelineRunner
from exporter.model import (
    Broker,
    BrokerConfig,
    ClusterSnapshot,
    GroupOffset,
    ListedTransaction,
    PartitionOffsets,
    PipelineSettings,
    ProducerState,
)
from exporter.pipeline.session import LEAN_JVM_OPTIONS

#: The edge values of the issue, and the wrong types.
EDGES: dict[str, object] = {
    "zero": 0,
    "negative": -1,
    "2^31": 2**31,
    "2^63": 2**63,
    "10^400": 10**400,
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "empty": "",
    "unicode": "ünïcødé-✓",
    "nul": "a\x00b",
    "surrogate": "\ud800",
    "true": True,
    "list": [1],
    "mapping": {"a": 1},
}

#: Every cluster's groups are on (the family runs), with per-partition series.
BASE: dict[str, Any] = {
    "clusters": [
        {
            "name": "edge",
            "bootstrap_servers": "127.0.0.1:9092",
            "groups": {"enabled": True, "per_partition": True},
        }
    ],
    "web": {"listen_address": "127.0.0.1:0"},
    "attribution": [
        "builtins",
        {"name": "billing", "pattern": "^billing-(?P<application>[a-z]+)-"},
        {"builtin": "spring", "prefixes": ["payments-tx-"]},
    ],
}

Path_ = tuple[str | int, ...]


def _kind_bounds(kind: Kind) -> list[object]:
    """The ends of a declared range and one step past each."""
    if isinstance(kind, Integer):
        return [kind.minimum, kind.maximum, kind.minimum - 1, kind.maximum + 1]
    if isinstance(kind, Duration):
        low, high = kind.minimum_ms, kind.maximum_ms
        ends: list[object] = [f"{low}ms", f"{high}ms", f"{high + 1}ms"]
        return ends + ([f"{low - 1}ms"] if low else [])
    return []


def _declared(section: Section, prefix: Path_) -> Iterator[tuple[Path_, list[object]]]:
    for key in section.keys:
        path = (*prefix, key.name)
        if isinstance(key.kind, Nested):
            yield from _declared(key.kind.section, path)
        elif isinstance(key.kind, Items):
            yield from _declared(key.kind.section, (*path, 0))
        else:
            yield path, _kind_bounds(key.kind)


def _parsed_sections() -> Iterator[tuple[Path_, list[object]]]:
    """The keys of the sections read by parsers of their own, with their ranges."""
    groups: Path_ = ("clusters", 0, "groups")
    for name, (low, high) in GROUP_LIMITS.items():
        yield (*groups, name), [low, high, low - 1, high + 1]
    for name in ("enabled", "per_partition", "allow", "deny"):
        yield (*groups, name), []
    history_days = [f"{d}d" for d in (1, MAX_RETENTION_MS // DAY_MS, MAX_RETENTION_MS // DAY_MS + 1)]
    yield ("history", "retention"), ["23h", *history_days]
    yield ("history", "compact_every"), ["1m", "59s", "30d", "31d"]
    yield ("history", "buffer_cycles"), [1, 100_000, 100_001]
    yield ("history", "batch_cycles"), [1, 1_000, 1_001]
    yield ("history", "path"), []
    for name in ("pattern", "name", "application"):
        yield ("attribution", 1, name), []
    for name in ("prefixes", "application"):
        yield ("attribution", 2, name), []
    for name in ("security.protocol", "client.id", "sasl.password"):
        yield ("clusters", 0, "kafka", name), []
    yield ("clusters", 0, "kafka_files", "sasl.password"), []
    for name in ("spark.sql.shuffle.partitions", "spark.hadoop.fs.s3a.secret.key"):
        yield ("spark", "conf", name), []


def _keys() -> list[tuple[Path_, list[object]]]:
    parsed = dict(_parsed_sections())
    declared = [(p, b) for p, b in _declared(CONFIG, ()) if p not in parsed and p[-1] not in _PARSED]
    return declared + list(parsed.items())


#: Keys declared as parsed sections: their own keys are listed in _parsed_sections.
_PARSED = ("groups", "history", "attribution", "kafka", "kafka_files", "conf")
KEYS = _keys()
PIPELINE_KEYS = [(p, b) for p, b in KEYS if p[0] in ("pipeline", "attribution") or "groups" in p]


def with_value(path: Path_, value: object, history: Path | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(yaml.safe_dump(BASE))
    if path[0] == "history":
        raw["history"] = {"path": str(history or "/nonexistent/history")}
    node: Any = raw
    for step in path[:-1]:
        node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
    node[path[-1]] = value
    return raw


def values_for(bounds: list[object]) -> list[tuple[str, object]]:
    return [*EDGES.items(), *((f"bound {b!r}", b) for b in bounds)]


def key_id(path: Path_) -> str:
    return ".".join(str(p) for p in path)


class NoSpark(PipelineRunner):
    def begin_start(self) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


# --- check-config: exit 0 or exit 2 naming the key, for every value at every key ----------------


@pytest.mark.parametrize(("path", "bounds"), KEYS, ids=[key_id(p) for p, _ in KEYS])
def test_every_value_at_every_key_is_refused_naming_it_or_accepted_and_usable(
    path: Path_,
    bounds: list[object],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative state_dir or history path lands here
    monkeypatch.setenv("KTE_EDGE_SECRET", "from-the-environment")
    file = tmp_path / "config.yml"
    accepted = []
    for name, value in values_for(bounds):
        file.write_text(yaml.safe_dump(with_value(path, value, tmp_path / "history")))
        capsys.readouterr()
        code = main(["check-config", "--config.file", str(file)])
        err = capsys.readouterr().err
        assert code in (0, 2), (name, code, err)
        assert "Traceback" not in err and "unexpected error" not in err, (name, err)
        if code == 2:
            assert str(path[-1]) in err, f"{name}: the message does not name the key:\n{err}"
            continue
        accepted.append(name)
        config = load_config(file)
        daemon = Daemon(config, registry=CollectorRegistry(), pipeline=NoSpark(config.spark, config.pipeline))
        daemon.stop()
    print(f"{key_id(path)}: accepted {accepted or 'none'}")


@pytest.mark.parametrize("memory", ["0m", "1k", "511m", "65t", "128t", "99999999t", "9223372036854775807k"])
def test_an_impossible_driver_memory_is_refused(memory: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Config_from({"spark": {"driver_memory": memory}})
    assert raised.value.problems[0].startswith("spark.driver_memory: ")


@pytest.mark.parametrize("master", ["local[0]", "local[2147483648]", "local[2,0]", "local[1025]"])
def test_a_local_master_spark_refuses_is_refused(master: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Config_from({"spark": {"master": master}})
    assert raised.value.problems[0].startswith("spark.master: ")


def test_the_largest_driver_memory_accepted_starts_a_jvm() -> None:
    """The model's maximum is a heap the JVM reserves (with the embedded driver's flags)."""
    largest = f"{SparkConfig.MAX_DRIVER_MEMORY_MB >> 20}t"
    assert Config_from({"spark": {"driver_memory": largest}}).spark.driver_memory == largest
    flags = [f for f in LEAN_JVM_OPTIONS if not f.startswith("-XX:+ExitOnOutOfMemoryError")]
    done = subprocess.run(
        ["java", *flags, f"-Xmx{largest}", "-version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def Config_from(extra: dict[str, Any]) -> Config:  # noqa: N802
    from exporter.config import parse_config

    return parse_config({**BASE, **extra}, env={})


# --- the pipeline: every accepted pipeline input completes its cycles ----------------------------

T0 = 1_700_000_000_000
TOPIC = "orders"
TID = "billing-ledger-tx-1"


def fixture_snapshot(now_ms: int) -> ClusterSnapshot:
    """Two partitions: one with an open transaction no coordinator lists (a hanging candidate)
    at its LSO, where a read_committed group waits; another group is behind on the second."""
    producer = ProducerState(
        topic=TOPIC,
        partition=0,
        broker_id=1,
        producer_id=77,
        producer_epoch=3,
        last_sequence=5,
        last_timestamp_ms=now_ms - 3_600_000,
        coordinator_epoch=1,
        current_txn_start_offset=10,
    )
    return ClusterSnapshot(
        cluster="edge",
        taken_at_ms=now_ms,
        brokers=(Broker(1, "b1", 9092),),
        broker_configs=(BrokerConfig(1),),
        partitions=(
            PartitionOffsets(TOPIC, 0, 1, high_watermark=15, last_stable_offset=10, log_start_offset=0),
            PartitionOffsets(TOPIC, 1, 1, high_watermark=40, last_stable_offset=40, log_start_offset=0),
        ),
        producers=(producer,),
        listed_transactions=(ListedTransaction(1, TID, 78, "Ongoing"),),
        transactional_ids_visible=True,
        reread_producers=(producer,),
        reread_partitions=frozenset({(TOPIC, 0)}),
        group_offsets=(
            GroupOffset("reader", TOPIC, 0, 10, 1, "Stable"),
            GroupOffset("reader", TOPIC, 1, 30, 1, "Stable"),
            GroupOffset("billing-ledger", TOPIC, 1, 39, 1, "Stable"),
        ),
        coordinators_listed=frozenset({1}),
    )


@dataclass(frozen=True)
class PipelineInput:
    settings: PipelineSettings
    groups: GroupsConfig
    rules: tuple[AttributionRule, ...]


def accepted_pipeline_inputs() -> dict[PipelineInput, str]:
    """Each distinct pipeline input the model accepts among the edge values, with the first
    (key, value) that gave it; the base config's first."""
    from exporter.config import parse_config

    base = parse_config(BASE, env={})
    seen = {PipelineInput(base.pipeline, base.clusters[0].groups, base.attribution): "the base config"}
    for path, bounds in PIPELINE_KEYS:
        for name, value in values_for(bounds):
            try:
                config = parse_config(with_value(path, value), env={})
            except ConfigError:
                continue
            made = PipelineInput(config.pipeline, config.clusters[0].groups, config.attribution)
            seen.setdefault(made, f"{key_id(path)} = {name}")
    return seen


@pytest.mark.spark
def test_every_accepted_pipeline_input_completes_a_cycle(spark: SparkSession) -> None:
    """Each input runs a second cycle, on the memory the first cycle of the base config left
    (hanging candidates, group partitions waiting at the LSO), so that the settings that
    count cycles meet a memory. The inputs are the clusters of one round (each with its own
    settings, as a fleet's are): a cluster whose input fails Spark fails alone and is named,
    and so is a family that fails."""
    from exporter.pipeline.compute import compute
    from exporter.pipeline.rounds import ClusterRun, compute_round

    inputs = accepted_pipeline_inputs()
    assert len(inputs) > 10, "the edge table accepts the ends of every range"
    base = next(iter(inputs))
    first = compute(
        spark, fixture_snapshot(T0), base.settings, None, T0, groups=base.groups, rules=base.rules
    )
    assert first.memory.candidates, "the fixture has a hanging candidate"
    now = T0 + 30_000
    origins = {f"edge-{i}": origin for i, origin in enumerate(inputs.values())}
    runs = [
        ClusterRun(
            replace(fixture_snapshot(now), cluster=name),
            first.memory,
            now,
            settings=made.settings,
            groups=made.groups,
            rules=made.rules,
        )
        for name, made in zip(origins, inputs, strict=True)
    ]
    done = compute_round(spark, runs)
    failed = [f"{origins[name]}: {why}" for name, why in done.failures.items()]
    failed += [
        f"{origins[name]}: the {family} family failed"
        for name, result in done.results.items()
        for family in result.failed_families
    ]
    print(f"{len(inputs)} distinct pipeline inputs ran a cycle each, as one round")
    assert not failed, "\n".join(failed)
    assert set(done.results) == set(origins)
