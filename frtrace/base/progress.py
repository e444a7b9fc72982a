"""What a long run says on stderr while it works: its phases (discover, load, analyse, render),
each with its count and elapsed time, and the notices a user should see once.

On a terminal, a live display (rich): every phase on its line, the running one with a
spinner, and a bar where it has a count. Where stderr is not a terminal (a CI log, a file),
one line per phase as it ends, ``frtrace: load: 1,024 of 1,024 files in 31.8 s``, and one
every ``interval_s`` while a phase runs longer, so that a log never sits silent.

Quick runs stay quiet: nothing is shown before the run has taken ``after_s`` (1 s; the
environment's ``FRTRACE_PROGRESS_AFTER_S`` sets it, 0 shows every run); the phases that ended
before then are shown with the first line. ``Progress(enabled=False)`` (``-q``) shows nothing.

The display is refreshed by the phases' own updates (a phase with a count: the files loaded)
and, while a phase without one runs, by a thread of its own, stopped when that phase ends:
no thread runs while files are read, since the readers fork their workers.

rich is imported only where a terminal display is shown (a quick run imports none of it).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, TextIO

__all__ = ["AFTER_S", "INTERVAL_S", "Phase", "Progress", "as_progress", "owned"]

# Nothing is shown before a run has taken this long (FRTRACE_PROGRESS_AFTER_S overrides).
AFTER_S = 1.0
# Without a terminal, a phase that runs longer says so this often.
INTERVAL_S = 10.0
# On a terminal, the display is redrawn at most this often.
REFRESH_S = 0.1


class Phase:
    """One step of the run: its count (``update``) and what it ended with (``describe``)."""

    def __init__(self, owner: Progress, name: str, total: int | None, unit: str) -> None:
        self.owner = owner
        self.name = name
        self.total = total
        self.unit = unit
        self.done = 0
        self.note = ""
        self.started = time.monotonic()
        self.ended: float | None = None
        self.said_at = self.started  # (the last interim line)
        self.said = False  # its final line is out

    def update(self, done: int) -> None:
        """``done`` of the phase's ``total`` are done."""
        self.done = done
        self.owner._changed()

    def describe(self, note: str) -> None:
        """What the phase did, said instead of its count (``"1,024 files (421 MB)"``)."""
        self.note = note

    @property
    def elapsed(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def summary(self) -> str:
        if self.note:
            return self.note
        if self.total is not None:
            return f"{self.done:,} of {self.total:,} {self.unit}"
        return "done" if self.ended is not None else "running"


class Progress:
    """The phases of one run, shown on ``stream`` (stderr) as they go; see the module."""

    def __init__(
        self,
        enabled: bool = True,
        *,
        stream: TextIO | None = None,
        after_s: float | None = None,
        interval_s: float = INTERVAL_S,
        terminal: bool | None = None,
    ) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.after_s = _after_s() if after_s is None else after_s
        self.interval_s = interval_s
        if terminal is None:
            try:
                terminal = bool(self.stream.isatty())
            except (AttributeError, ValueError):  # (closed, or no such method)
                terminal = False
        self.terminal = terminal
        self.started = time.monotonic()
        self.phases: list[Phase] = []
        self.said: set[str] = set()
        self.showing = False  # past after_s: lines, or the live display, are out
        self.live: Any = None  # rich.live.Live, on a terminal once shown
        self.drawn = 0.0
        self.lock = threading.RLock()
        self.ticker: threading.Thread | None = None
        self.stop_ticking = threading.Event()

    # ---- what the run calls -----------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str, *, total: int | None = None, unit: str = "files") -> Iterator[Phase]:
        """A phase from entering to leaving the block; ``total``: its count, if it has one.
        Inside a running phase of the same name, that phase (its total set where given): a
        step that counts the files within the caller's wider phase."""
        running = self.phases[-1] if self.enabled and self.phases else None
        if running is not None and running.ended is None and running.name == name:
            if total is not None:
                running.total = total
            yield running
            return
        step = Phase(self, name, total, unit)
        if not self.enabled:
            yield step
            return
        with self.lock:
            self.phases.append(step)
        ticking = total is None and self._tick_start()
        try:
            yield step
        except BaseException:  # (the error says what happened: no line that it is done)
            step.note, step.said = "stopped", True
            raise
        finally:
            if ticking:
                self._tick_stop()
            with self.lock:
                step.ended = time.monotonic()
                self._changed(force=True)

    def record(self, name: str, note: str, started: float) -> None:
        """A phase that ran from ``started`` (``time.monotonic()``) to now, as ``note`` says."""
        if not self.enabled:
            return
        step = Phase(self, name, None, "")
        step.started, step.note = started, note
        with self.lock:
            self.phases.append(step)
            step.ended = time.monotonic()
            self._changed(force=True)

    def notice(self, line: str) -> None:
        """Say ``line`` now (``frtrace: `` before it), once per run: not again if said."""
        if not self.enabled or line in self.said:
            return
        self.said.add(line)
        with self.lock:
            if self.live is not None:
                self.live.console.print(f"frtrace: {line}", markup=False, highlight=False)
            else:
                self._write(f"frtrace: {line}")

    def close(self) -> None:
        """End the display (before the report goes to stdout); say what is left to say."""
        if not self.enabled:
            return
        self._tick_stop()
        with self.lock:
            if self.live is not None:
                self.live.refresh()
                self.live.stop()
                self.live = None
            elif self.showing:
                self._lines()
            self.enabled = False  # (said once: nothing after the close)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ---- showing ------------------------------------------------------------------------------

    def _changed(self, *, force: bool = False) -> None:
        if not self.enabled:
            return
        with self.lock:
            now = time.monotonic()
            if not self.showing:
                if now - self.started < self.after_s:
                    return
                self.showing = True
                if self.terminal:
                    self._start_live()
            if self.live is not None:
                if force or now - self.drawn >= REFRESH_S:
                    self.drawn = now
                    self.live.refresh()
            else:
                self._lines()

    def _lines(self) -> None:
        """Without a terminal: each ended phase's line, once, in order; an interim line for a
        phase running past ``interval_s`` since it began or last said so."""
        now = time.monotonic()
        for step in self.phases:
            if step.said:
                continue
            if step.ended is not None:
                step.said = True
                self._write(f"frtrace: {step.name}: {step.summary()} in {_seconds(step.elapsed)}")
            elif now - step.said_at >= self.interval_s:
                step.said_at = now
                so_far = f"{step.summary()} so far" if step.total is not None else "running"
                self._write(f"frtrace: {step.name}: {so_far}, {_seconds(step.elapsed)}")

    def _write(self, line: str) -> None:
        with contextlib.suppress(Exception):  # (a closed or full stderr: say nothing)
            self.stream.write(line + "\n")
            self.stream.flush()

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=self.stream, force_terminal=True)
        self.live = Live(
            get_renderable=self._render,
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def _render(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.spinner import Spinner
        from rich.table import Table

        grid = Table.grid(padding=(0, 1))
        for _ in range(5):
            grid.add_column()
        for step in list(self.phases):
            mark: Any = "[green]✓[/]" if step.ended is not None else Spinner("dots")
            bar: Any = ""
            if step.total is not None and step.ended is None:
                bar = ProgressBar(total=max(1, step.total), completed=step.done, width=30)
            grid.add_row(mark, step.name, bar, step.summary(), _seconds(step.elapsed))
        return grid

    # ---- the ticker (phases without a count) -------------------------------------------------

    def _tick_start(self) -> bool:
        if self.ticker is not None:
            return False
        self.stop_ticking.clear()
        self.ticker = threading.Thread(target=self._tick, name="frtrace-progress", daemon=True)
        self.ticker.start()
        return True

    def _tick(self) -> None:
        period = REFRESH_S if self.terminal else 0.5
        while not self.stop_ticking.wait(period):
            self._changed()

    def _tick_stop(self) -> None:
        ticker, self.ticker = self.ticker, None
        if ticker is not None:
            self.stop_ticking.set()
            ticker.join()


def _after_s() -> float:
    try:
        return max(0.0, float(os.environ.get("FRTRACE_PROGRESS_AFTER_S", AFTER_S)))
    except ValueError:
        return AFTER_S


def _seconds(elapsed: float) -> str:
    return f"{elapsed:.1f} s"


def as_progress(progress: bool | Progress) -> Progress:
    """A ``progress`` argument as a Progress: True, one on stderr; False, one that is off."""
    return progress if isinstance(progress, Progress) else Progress(enabled=progress)


@contextlib.contextmanager
def owned(progress: bool | Progress) -> Iterator[Progress]:
    """``as_progress``, closed at the end of the block where it was made here (True)."""
    made = as_progress(progress)
    try:
        yield made
    finally:
        if made is not progress:
            made.close()
