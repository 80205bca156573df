"""How a round's families are planned (exporter.pipeline.compute._planned_frames): on a
classic session the families that do not read the classified frame are planned while the
classification is, the others after it, on threads beside the caller; every build has ended
before the round goes on or fails; on Spark Connect, one after another on the calling thread.

Stand-in families and builds, no Spark: every wait is for an event, bounded generously, and
nothing asserts how long anything took. That the plans and results are the same whatever the
threads is shown by the pipeline tests (tests/unit/test_pipeline.py, test_pipeline_rounds.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest

from exporter.pipeline.compute import _planned_frames

WAIT_S = 30.0


@dataclass(frozen=True)
class StandIn:
    name: str
    classified: bool


class Classic:
    _sc = object()


class Connect:
    pass


PLANNED: list[tuple[Any, frozenset[str]]] = [
    (StandIn("coordinators", False), frozenset({"coordinators"})),
    (StandIn("findings", True), frozenset({"findings"})),
    (StandIn("aborts", False), frozenset({"aborts"})),
    (StandIn("brokers", True), frozenset({"brokers"})),
]


def test_families_without_the_classified_frame_are_planned_while_the_classification_is() -> None:
    independent_started = threading.Barrier(3, timeout=WAIT_S)  # both families and the caller
    classified = threading.Event()
    seen: dict[str, bool] = {}

    def classification() -> None:
        independent_started.wait()  # would time out if they waited for it
        classified.set()

    def build(family: Any, selected: frozenset[str]) -> dict[str, Any]:
        seen[family.name] = classified.is_set()
        if not family.classified:
            independent_started.wait()
        return {name: f"frame of {name}" for name in selected}

    frames = _planned_frames(Classic(), PLANNED, classification, build)  # type: ignore[arg-type]

    assert list(frames) == ["coordinators", "aborts", "findings", "brokers"]
    assert dict(frames["findings"]) == {"findings": "frame of findings"}  # type: ignore[comparison-overlap]
    assert seen == {"coordinators": False, "aborts": False, "findings": True, "brokers": True}


def test_families_reading_the_classified_frame_are_planned_two_at_a_time_beside_the_caller() -> None:
    together = threading.Barrier(2, timeout=WAIT_S)
    threads: set[str] = set()

    def build(family: Any, selected: frozenset[str]) -> dict[str, Any]:
        threads.add(threading.current_thread().name)
        if family.classified:
            together.wait()  # both classified families at once, or a timeout
        return {}

    _planned_frames(Classic(), PLANNED, lambda: None, build)  # type: ignore[arg-type]

    assert threading.current_thread().name not in threads
    assert len(threads) == 2


def test_a_failing_build_fails_the_round_only_after_every_other_build_has_ended() -> None:
    release = threading.Event()
    ended: list[str] = []

    def build(family: Any, selected: frozenset[str]) -> dict[str, Any]:
        if family.name == "coordinators":
            raise RuntimeError("no plan for coordinators")
        release.wait(WAIT_S)
        ended.append(family.name)
        return {}

    def classification() -> None:
        threading.Timer(0.2, release.set).start()

    with pytest.raises(RuntimeError, match="no plan for coordinators"):
        _planned_frames(Classic(), PLANNED, classification, build)  # type: ignore[arg-type]

    assert sorted(ended) == ["aborts", "brokers", "findings"]


def test_a_failing_classification_fails_the_round_after_the_builds_it_ran_beside() -> None:
    ended: list[str] = []

    def build(family: Any, selected: frozenset[str]) -> dict[str, Any]:
        threading.Event().wait(0.1)
        ended.append(family.name)
        return {}

    def classification() -> None:
        raise RuntimeError("the classification failed")

    with pytest.raises(RuntimeError, match="classification failed"):
        _planned_frames(Classic(), PLANNED, classification, build)  # type: ignore[arg-type]

    assert sorted(ended) == ["aborts", "coordinators"]


def test_on_spark_connect_families_are_planned_in_order_on_the_calling_thread() -> None:
    order: list[str] = []

    def build(family: Any, selected: frozenset[str]) -> dict[str, Any]:
        order.append(f"{family.name} on {threading.current_thread().name}")
        return {}

    _planned_frames(Connect(), PLANNED, lambda: order.append("classification"), build)  # type: ignore[arg-type]

    here = threading.current_thread().name
    assert order == [
        "classification",
        f"coordinators on {here}",
        f"findings on {here}",
        f"aborts on {here}",
        f"brokers on {here}",
    ]
