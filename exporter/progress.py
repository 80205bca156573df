"""Progress of a long command on a terminal: one line on stderr, redrawn in place, saying
what the command is doing and for how long (``find-hanging: starting Spark (4 s)``).

Nothing at all when stderr is not a terminal (a script, a pipe, a log file), and nothing for
a command that ends within :data:`DELAY_S`. The line is erased before the command prints
its answer or a message (:func:`clear`, called by :mod:`exporter.operator.render`), so it
never mixes with them.

A command opens one with :func:`progress`; code deeper down names its stage with
:func:`stage` without knowing whether anyone shows it (a daemon, a test: no one does).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

#: A command that ends sooner shows no progress at all.
DELAY_S = 0.5
#: How often the line is redrawn.
PERIOD_S = 0.25
_ERASE = "\r\x1b[K"

#: The progress shown now, innermost last (a command shows one; nested blocks show none).
_shown: list[Progress | None] = []


class Progress:
    """The progress line of one command (see the module doc)."""

    def __init__(
        self,
        command: str,
        stream: TextIO,
        *,
        delay_s: float = DELAY_S,
        period_s: float = PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = command
        self._stream = stream
        self._delay_s = delay_s
        self._period_s = period_s
        self._clock = clock
        self._started = clock()
        self._stage = ""
        self._drawn = False
        self._finished = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stage(self, what: str) -> None:
        with self._lock:
            self._stage = what

    def clear(self, *, finished: bool = False) -> None:
        """Erase the line (it is drawn again at the next tick unless ``finished``)."""
        with self._lock:
            self._finished = self._finished or finished
            self._erase_locked()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.clear(finished=True)

    def line(self) -> str:
        elapsed = self._clock() - self._started
        what = f"{self._stage} " if self._stage else ""
        return f"{self.command}: {what}({elapsed:.0f} s)"

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            if self._clock() - self._started < self._delay_s:
                continue
            with self._lock:
                if self._finished:
                    return
                self._write(_ERASE + self.line())
                self._drawn = True

    def _erase_locked(self) -> None:
        if self._drawn:
            self._write(_ERASE)
            self._drawn = False

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # the terminal went away: nothing to show
            self._finished = True


@contextmanager
def progress(command: str, stream: TextIO | None = None) -> Iterator[None]:
    """Show ``command``'s progress while the block runs, when ``stream`` (stderr) is a
    terminal; :func:`stage` names what it does."""
    out = stream if stream is not None else sys.stderr
    shown = None
    if _is_terminal(out) and not any(_shown):
        shown = Progress(command, out, delay_s=DELAY_S, period_s=PERIOD_S)
    _shown.append(shown)
    if shown is not None:
        shown.start()
    try:
        yield
    finally:
        if shown is not None:
            shown.stop()
        _shown.pop()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def stage(what: str) -> None:
    """Name the current stage of the command's progress, if one is shown."""
    current = next((p for p in reversed(_shown) if p is not None), None)
    if current is not None:
        current.stage(what)


def clear(*, finished: bool = False) -> None:
    """Erase the progress line before printing (``finished``: the answer follows, the line
    is not drawn again)."""
    current = next((p for p in reversed(_shown) if p is not None), None)
    if current is not None:
        current.clear(finished=finished)
