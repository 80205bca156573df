"""bench/pipeline_bench.py's floor: what any cycle on Spark costs before it computes
anything. (The benchmarks are for reading, not for CI; this checks that the floor does the
work it claims: every snapshot table handed over the pipeline's way, every row read.)"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

from exporter.pipeline.tables import FILE_MIN_ROWS, SNAPSHOT_TABLES

pytestmark = pytest.mark.spark

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _pipeline_bench() -> ModuleType:
    # Loaded from its file: bench/ is a folder of scripts, and the script imports its
    # neighbour jvmstat by name.
    sys.path.insert(0, str(_BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_pipeline_bench", _BENCH / "pipeline_bench.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up by name
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCH))


def test_the_floor_hands_every_snapshot_table_over_and_reads_every_row(spark: SparkSession) -> None:
    bench = _pipeline_bench()
    snap = bench.synthetic_snapshot(3000)

    counts = bench.floor_cycle(spark, snap)

    assert counts == {name: len(rows_of(snap)) for name, (_, rows_of) in SNAPSHOT_TABLES.items()}
    # The large tables take the pipeline's other way in (as files): the floor covers both.
    assert max(counts.values()) >= FILE_MIN_ROWS
