"""bench/jvmstat.py: the benchmarks' reading of a JVM's CPU by thread kind and of its code
cache. (The benchmarks are for reading, not for CI; this checks their arithmetic.)"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

# Loaded from its file: bench/ is a folder of scripts, not a package on the path.
_spec = importlib.util.spec_from_file_location(
    "bench_jvmstat", Path(__file__).resolve().parents[2] / "bench" / "jvmstat.py"
)
assert _spec is not None and _spec.loader is not None
jvmstat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jvmstat)


@pytest.mark.parametrize(
    ("thread", "kind"),
    [
        ("C2 CompilerThre", "JIT compiler"),
        ("C1 CompilerThre", "JIT compiler"),
        ("Sweeper thread", "JIT compiler"),
        ("VM Thread", "GC and VM"),
        ("Executor task l", "Spark tasks"),
        ("Thread-12", None),
        ("dag-scheduler-e", None),
    ],
)
def test_a_thread_is_counted_by_the_kind_its_name_gives(thread: str, kind: str | None) -> None:
    assert jvmstat.kind_of(thread) == kind


def test_the_rest_is_the_process_cpu_less_the_named_kinds_even_when_threads_ended() -> None:
    before = {"total": 10.0, "JIT compiler": 4.0, "GC and VM": 1.0, "Spark tasks": 1.0}
    # A py4j thread ended in between: the process's total keeps its CPU, /proc no longer
    # lists it.
    after = {"total": 16.0, "JIT compiler": 6.0, "GC and VM": 1.5, "Spark tasks": 2.0}
    delta = jvmstat.cpu_delta(before, after)
    assert delta == {"JIT compiler": 2.0, "GC and VM": 0.5, "Spark tasks": 1.0, jvmstat.REST: 2.5}
    assert tuple(delta) == jvmstat.KINDS


def test_a_process_that_is_gone_reads_as_nothing() -> None:
    gone = 2**22 + 1  # above the kernel's largest pid
    assert jvmstat.thread_cpu(gone) == {}
    assert jvmstat.code_cache_mib(gone) == 0.0


def test_this_process_reads_its_own_cpu() -> None:
    reading = jvmstat.thread_cpu(os.getpid())
    assert reading["total"] > 0
