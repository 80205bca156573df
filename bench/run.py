"""Run every benchmark in one go and print all their figures (``make bench``).

In order, each as a subprocess with a time limit, its output streamed as it comes:

1. ``bench/pipeline_bench.py`` (the Spark pipeline; owned separately), when present;
2. ``bench/collect_bench.py`` (collection: ours vs naive vs Kafka's find-hanging);
3. ``bench/daemon_memory.py`` (the daemon's RSS, Python + Spark JVM, and cycle times).

Arguments after ``--`` are not supported on purpose: each script has its own ``--help``; run
it directly for other settings. ``--quick`` runs smaller variants (for a smoke run).
The exit status is non-zero when a benchmark failed or ran out of time.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass(frozen=True)
class Step:
    name: str
    script: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    timeout_s: float


STEPS = (
    Step("pipeline", "pipeline_bench.py", (), (), 240.0),
    Step("collection", "collect_bench.py", (), ("--sizes", "100,1000", "--no-cluster3",
                                                "--repeats", "3"), 300.0),
    Step("daemon memory", "daemon_memory.py", (), ("--variants", "512m", "--duration", "40",
                                                   "--min-cycles", "3",
                                                   "--partitions", "1000"), 420.0),
)


def run_step(step: Step, quick: bool) -> tuple[str, float, str]:
    script = BENCH / step.script
    if not script.exists():
        return step.name, 0.0, "absent (skipped)"
    cmd = [sys.executable, str(script), *(step.quick_args if quick else step.args)]
    print(f"\n######## {step.name}: {' '.join(cmd)} (limit {step.timeout_s:.0f} s)", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=step.timeout_s)
    except subprocess.TimeoutExpired:
        # SIGTERM to its group lets the test bed stop its brokers; then make sure.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return step.name, time.monotonic() - started, f"TIMED OUT after {step.timeout_s:.0f} s"
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        raise
    seconds = time.monotonic() - started
    return step.name, seconds, "ok" if code == 0 else f"FAILED (exit {code})"


def main() -> int:
    parser = argparse.ArgumentParser(description="Run every benchmark and print all figures.")
    parser.add_argument("--quick", action="store_true", help="smaller variants (smoke run)")
    parser.add_argument("--only", choices=[s.script.removesuffix(".py") for s in STEPS],
                        action="append", help="run only these (repeatable)")
    args = parser.parse_args()
    started = time.monotonic()
    outcomes = [run_step(step, args.quick) for step in STEPS
                if not args.only or step.script.removesuffix(".py") in args.only]
    print(f"\n######## summary ({time.monotonic() - started:.0f} s in all)")
    for name, seconds, outcome in outcomes:
        print(f"  {name:<16} {seconds:>6.0f} s  {outcome}")
    return 0 if all(o in ("ok", "absent (skipped)") for _, _, o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
