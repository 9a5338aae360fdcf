"""The process's stop signals (SIGINT, SIGTERM, SIGHUP) and who handles them now: the one owner.

A run has two parts that stop on a signal, each in its own way: the runner (stop sending, drain
what is in flight) and the supervisor of a launched server (stop the server while it starts, and
again at the end). Whoever needs the signals holds them; the last to take them gets them, and
releasing gives them back to the one before::

    signals.hold(runner.on_signal)      # the run: drain on a signal
    signals.hold(supervisor.on_signal)  # a server starting: stop it on a signal
    signals.release(supervisor.on_signal)   # ready: the runner has them again
    signals.release(runner.on_signal)       # nobody: the defaults are back

A signal the process ignored when the first holder came (SIGHUP under nohup) stays ignored: nohup
ignores it so that the run outlives the terminal. ``release(..., swallow=True)`` by the last holder
leaves the signals swallowed rather than at their defaults, for a process on its way out that
must not be killed half way (a second Ctrl-C while the launched server stops).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[signal.Signals], None]


def exit_code(sig: signal.Signals) -> int:
    """The exit code of a run a signal stopped: 128 + its number (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
    return 128 + int(sig)


def _swallow(signum: int, frame: object) -> None:
    """A signal while the process is already on its way out."""


class _Desk:
    """The holders (last one handles) and the loop the handlers are installed on."""

    def __init__(self) -> None:
        self.holders: list[Handler] = []
        self.handled: list[signal.Signals] = []
        self.loop: asyncio.AbstractEventLoop | None = None

    def dispatch(self, sig: signal.Signals) -> None:
        if self.holders:
            self.holders[-1](sig)

    def hold(self, handler: Handler) -> None:
        if not self.holders:
            self.loop = asyncio.get_running_loop()
            self.handled = [sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
            for sig in self.handled:
                self.loop.add_signal_handler(sig, self.dispatch, sig)
        self.holders.append(handler)

    def release(self, handler: Handler, swallow: bool) -> None:
        for index in range(len(self.holders) - 1, -1, -1):
            if self.holders[index] == handler:
                del self.holders[index]
                break
        else:
            return
        if self.holders:
            return
        loop, self.loop = self.loop, None
        for sig in self.handled:
            if loop is not None and not loop.is_closed():
                loop.remove_signal_handler(sig)
            if swallow:
                # Not a loop handler: closing the loop (the end of asyncio.run) would put the default back.
                signal.signal(sig, _swallow)
        self.handled = []


_DESK = _Desk()


def hold(handler: Handler) -> None:
    """``handler`` gets every stop signal from now until it releases them (or someone else holds them)."""
    _DESK.hold(handler)


def release(handler: Handler, swallow: bool = False) -> None:
    """``handler`` no longer holds the signals; the holder before it has them again. With nobody left
    they go back to their defaults, or, with ``swallow``, are ignored until the process ends."""
    _DESK.release(handler, swallow)


def holder() -> Handler | None:
    """Who handles a stop signal now (None: the defaults)."""
    return _DESK.holders[-1] if _DESK.holders else None
