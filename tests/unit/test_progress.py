"""A long command's progress: one line redrawn on a terminal's stderr, erased before the
answer; nothing at all when stderr is not a terminal (exporter/progress.py)."""

from __future__ import annotations

import io
import threading
import time

import pytest

from exporter import progress


class _Terminal(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.drawn = threading.Event()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if "classifying" in text:
            self.drawn.set()
        return super().write(text)


def test_a_terminal_sees_the_command_its_stage_and_the_seconds_then_the_line_erased(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "PERIOD_S", 0.01)
    terminal = _Terminal()
    with progress.progress("find-hanging", terminal):
        progress.stage("classifying")
        assert terminal.drawn.wait(10)
        progress.clear(finished=True)
        after = len(terminal.getvalue())
    shown = terminal.getvalue()
    assert "\r\x1b[Kfind-hanging: classifying (0 s)" in shown
    assert shown.endswith("\r\x1b[K")  # erased before the answer
    assert shown[after:] == ""  # and never drawn again once the answer is out


def test_a_pipe_or_a_file_sees_nothing() -> None:
    piped = io.StringIO()
    with progress.progress("report", piped):
        progress.stage("reading the cycles")
        progress.clear()
    assert piped.getvalue() == ""


def test_a_command_that_ends_within_the_delay_shows_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    monkeypatch.setattr(progress, "PERIOD_S", 0.01)
    terminal = _Terminal()
    with progress.progress("list", terminal):
        progress.stage("classifying")
    assert terminal.getvalue() == ""


def test_stages_named_where_no_progress_is_shown_are_ignored() -> None:
    progress.stage("collecting from Kafka")  # a daemon, a test: no one shows it
    progress.clear()


def test_a_log_line_erases_the_progress_line_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from exporter import logs

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "PERIOD_S", 0.01)
    terminal = _Terminal()
    with progress.progress("report", terminal):
        progress.stage("classifying")
        assert terminal.drawn.wait(10)
        shown = progress._shown[-1]
        assert shown is not None
        shown._period_s = 3600.0  # no redraw from now on (after the wait in flight)
        time.sleep(0.2)
        record = logging.LogRecord("exporter", logging.WARNING, __file__, 1, "careful", None, None)
        assert logs._erase_progress(record)
        assert terminal.getvalue().endswith("\r\x1b[K")
