"""Where the Spark driver JVM's CPU and memory go, read from ``/proc`` (no JDK tool needed:
the test machines and the image have a JRE only).

* :func:`thread_cpu` adds up the CPU time of the JVM's threads by what they do, from the
  thread names HotSpot and Spark give them: the JIT's compiler threads, the VM thread (where
  the serial collector runs, and every safepoint operation), the executor's task threads
  (the plan running), and the rest: above all the py4j threads that run the PySpark calls
  (building and planning DataFrames: the analyser, optimiser and planner). The rest is the
  process's CPU less the named kinds, since a py4j thread ends with its Python thread's
  connection (the daemon's pipeline runs on a new thread every cycle) and ``/proc`` then no
  longer lists it.
* :func:`code_cache_mib` is the resident part of the JIT's code cache: HotSpot reserves it as
  the JVM's one writable and executable mapping.

Used by pipeline_bench.py (the steady state of a warm engine) and daemon_memory.py (the RSS
slope by part).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")

#: Thread kinds, in the order they are printed; the last is the process's CPU less the others.
REST = "py4j calls (plan building), rest"
KINDS = ("JIT compiler", "GC and VM", "Spark tasks", REST)
_TOTAL = "total"

_KIND_OF = (
    (re.compile(r"^C\d CompilerThre|^Sweeper thread"), "JIT compiler"),
    (re.compile(r"^Executor task"), "Spark tasks"),
    (re.compile(r"^VM Thread$|^GC Thread|^VM Periodic"), "GC and VM"),
)


def kind_of(thread_name: str) -> str | None:
    for pattern, kind in _KIND_OF:
        if pattern.search(thread_name):
            return kind
    return None


def _cpu_s(stat: str) -> float:
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of ``pid``: in all, and of its live threads of the named kinds
    (empty when the process is gone). Take differences with :func:`cpu_delta`."""
    try:
        total = {_TOTAL: _cpu_s(Path(f"/proc/{pid}/stat").read_text())}
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        kind = kind_of(stat[stat.index("(") + 1 : stat.rindex(")")])
        if kind is not None:
            total[kind] = total.get(kind, 0.0) + _cpu_s(stat)
    return total


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds between two readings of :func:`thread_cpu`, by :data:`KINDS`."""
    named = {kind: max(0.0, after.get(kind, 0.0) - before.get(kind, 0.0)) for kind in KINDS[:-1]}
    spent = after.get(_TOTAL, 0.0) - before.get(_TOTAL, 0.0)
    return {**named, REST: max(0.0, spent - sum(named.values()))}


def code_cache_mib(pid: int) -> float:
    """Resident MiB of the JVM's code cache (its writable and executable mappings); 0 when
    the process is gone."""
    resident_kib = 0
    executable = False
    try:
        with open(f"/proc/{pid}/smaps") as smaps:
            for line in smaps:
                if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                    executable = line.split()[1] == "rwxp"
                elif executable and line.startswith("Rss:"):
                    resident_kib += int(line.split()[1])
    except OSError:
        return 0.0
    return resident_kib / 1024
