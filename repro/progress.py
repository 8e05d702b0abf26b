"""Progress for commands that can run longer than ~10 s: a tqdm bar on stderr.

    for case in progress(cases, desc="attention check", unit="case"): ...
    with live_bar(desc="points", total=n, unit="point") as bar: ...; say(bar, "a row"); bar.update()
    with progress_log("e2e", to_stderr=True) as log: experiment.run(params, log)   # each log line on stderr, the bar ticks
    with log.taken(desc="e2e points", unit="point") as bar: ...    # meanwhile the run's one bar counts points

Shown when stderr is a terminal; REPRO_PROGRESS=1 forces it on (e.g. in CI logs), 0 off. Output of the command
itself stays on stdout, so a bar never mixes into JSON.
"""
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

REFRESH_S = 1.0  # elapsed time is redrawn this often even when nothing ticks


def _disabled() -> bool | None:
    forced = os.environ.get("REPRO_PROGRESS", "").strip().lower()
    if forced in ("1", "true", "yes", "on"):
        return False
    if forced in ("0", "false", "no", "off"):
        return True
    return None  # tqdm's rule: off unless stderr is a terminal


def progress(iterable: Iterable | None = None, *, desc: str, total: int | None = None, unit: str = "it") -> tqdm:
    """A progress bar over `iterable` (or a manual one: `.update(n)`), on stderr."""
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, disable=_disabled(),
                dynamic_ncols=True, leave=False)


@contextmanager
def live_bar(*, desc: str, total: int | None = None, unit: str = "it") -> Iterator[tqdm]:
    """A manual progress bar (`.update(n)`) redrawn every REFRESH_S, so the elapsed time moves while one long
    item runs."""
    bar = progress(desc=desc, total=total, unit=unit)
    stop = threading.Event()

    def refresh():
        while not stop.wait(REFRESH_S):
            bar.refresh()

    ticker = threading.Thread(target=refresh, daemon=True)
    if not bar.disable:
        ticker.start()
    try:
        yield bar
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        bar.close()


def say(bar: tqdm, message: str, echo=print, to_stderr: bool = False) -> None:
    """Print `message` on stdout (stderr with `to_stderr`) above `bar` (or by `echo` when the bar is off)."""
    if to_stderr:
        (bar.write if not bar.disable else print)(str(message), file=sys.stderr)
    elif bar.disable:
        echo(message)
    else:
        bar.write(str(message), file=sys.stdout)


class BarLog:
    """`log(message)`: the message printed above `bar`, which counts messages unless a caller has taken it."""

    def __init__(self, bar: tqdm, echo=print, to_stderr: bool = False):
        self.bar, self.echo, self.to_stderr, self._taken = bar, echo, to_stderr, False

    def __call__(self, message: str) -> None:
        say(self.bar, message, self.echo, self.to_stderr)
        if not self._taken:
            self.bar.update(1)

    @contextmanager
    def taken(self, *, desc: str, unit: str) -> Iterator[tqdm]:
        """The same bar, counting what the caller counts (from 0, total 0: `.total` grows as work becomes known)
        instead of messages; the messages' count and label come back after."""
        bar = self.bar
        self._taken = True
        if bar.disable:
            try:
                yield bar
            finally:
                self._taken = False
            return
        before = (bar.desc, bar.unit, bar.n, bar.total, bar.start_t)
        bar.reset(total=0)
        bar.set_description_str(desc, refresh=False)
        bar.unit = unit
        try:
            yield bar
        finally:
            bar.refresh()  # the last count drawn
            desc0, unit0, n0, total0, start0 = before
            bar.set_description_str(desc0, refresh=False)
            bar.unit, bar.n, bar.total, bar.start_t, self._taken = unit0, n0, total0, start0, False
            bar.refresh()


@contextmanager
def progress_log(desc: str, echo=print, to_stderr: bool = False) -> Iterator[BarLog]:
    """A `log(message)` callable for long runs (BarLog): prints each message above a bar that counts them and shows
    the elapsed time, redrawn every REFRESH_S so a quiet minute still shows the command is alive. `to_stderr`: the
    messages go to stderr with the bar, leaving stdout to the command's result."""
    with live_bar(desc=desc, unit="step") as bar:
        yield BarLog(bar, echo, to_stderr)
