"""Several servers without a gateway (``--server-url`` given more than once): which server a request goes
to, and what the run knows of each one. Pure: no I/O, no clock of its own (run/serverset.py does both).

    choose(slots, key)      a conversation's key pins it to one server (rendezvous hash over the servers
                            that are in); without a key, the least loaded server that is in
    Slot                    one server: in or out, its requests in flight, its last load report, its counts
    disagreement(answers)   the first two servers that answer one question differently (model, parsers)
    status_text / summary_lines   the servers' part of the status line and of the summary

Least load is the server's own ``/v1/loads`` (running + waiting) from the last poll, plus what this run sent
it since; a server without ``/v1/loads`` is judged by this run's requests in flight on it. Ties go to the
server sent the fewest requests, so equal servers take turns. Each request a server ended without an
answer since its last answer counts as one more request on it: a server that rejects everything at once
is always idle, and would otherwise draw most of the prompts to fail there; so it is sent one more only
while its failures in a row are fewer than the others' load.

Pinning is rendezvous (highest random weight) hashing: a key goes to the server with the highest
``hash(key, url)`` among those that are in. While that server is in, every turn of the conversation goes to
it; when it is out, only its own conversations move (each to its next choice), and they come back with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# A server that was taken out is asked again after these many seconds, doubling up to the last.
PROBE_FIRST = 0.5
PROBE_MAX = 5.0
# The status line names each server's requests in flight up to this many servers; beyond, their range.
STATUS_NAMED = 4


@dataclass
class Slot:
    """One server as the run sees it. ``url`` is the URL as printed (credentials masked)."""

    url: str
    up: bool = True
    in_flight: int = 0  # this run's requests on it now
    reported: int | None = None  # running + waiting at its last /v1/loads; None: it reports none
    in_flight_at_report: int = 0  # this run's requests on it when that report was read
    sent: int = 0
    answered: int = 0
    failing: int = 0  # requests it ended without an answer since its last answer
    moved: int = 0  # requests that failed on it as it went out (sent again elsewhere)
    outs: int = 0
    out_since: float | None = None
    out_seconds: float = 0.0

    def load(self) -> int:
        """Requests on the server now, as best known: its last report plus what was sent since (never
        below this run's own in flight), plus its failures in a row."""
        if self.reported is None:
            return self.in_flight + self.failing
        return max(self.in_flight, self.reported + self.in_flight - self.in_flight_at_report) + self.failing

    def sending(self) -> None:
        self.sent += 1
        self.in_flight += 1

    def ended(self, answered: bool) -> None:
        self.in_flight -= 1
        self.answered += answered
        self.failing = 0 if answered else self.failing + 1

    def moved_away(self) -> None:
        """A request failed on it as it went out: sent again elsewhere."""
        self.moved += 1

    def report(self, running_and_waiting: int | None) -> None:
        self.reported = running_and_waiting
        self.in_flight_at_report = self.in_flight

    def take_out(self, now: float) -> None:
        if self.up:
            self.up, self.out_since = False, now
            self.outs += 1
            self.reported = None

    def bring_back(self, now: float) -> float:
        """Back in; returns how long it was out."""
        if self.up or self.out_since is None:
            self.up = True
            return 0.0
        out = now - self.out_since
        self.up, self.out_since, self.failing = True, None, 0
        self.out_seconds += out
        return out

    def out_for(self, now: float) -> float:
        return self.out_seconds + (now - self.out_since if self.out_since is not None else 0.0)


def weight(key: str, url: str) -> int:
    """The rendezvous weight of ``url`` for ``key``: stable across runs and processes."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{url}".encode(), digest_size=8).digest(), "big")


def choose(slots: Sequence[Slot], key: str | None = None) -> int | None:
    """The index of the server a request goes to, or None when every server is out."""
    up = [i for i, slot in enumerate(slots) if slot.up]
    if not up:
        return None
    if key is not None:
        return max(up, key=lambda i: weight(key, slots[i].url))
    return min(up, key=lambda i: (slots[i].load(), slots[i].in_flight, slots[i].sent, i))


def probe_delay(tries: int) -> float:
    """Seconds before the ``tries``-th probe (0-based) of a server that is out."""
    return float(min(PROBE_MAX, PROBE_FIRST * 2.0**tries))


def disagreement(answers: Sequence[tuple[str, T]]) -> tuple[str, T, str, T] | None:
    """The first server whose answer differs from the first server's: (url1, answer1, url2, answer2)."""
    if not answers:
        return None
    first_url, first = answers[0]
    for url, answer in answers[1:]:
        if answer != first:
            return first_url, first, url, answer
    return None


def status_text(slots: Sequence[Slot], now: float) -> str:
    """E.g. ``servers 1/2 in (out: http://b for 12 s); in flight http://a 31``."""
    up = [slot for slot in slots if slot.up]
    out = [slot for slot in slots if not slot.up]
    head = f"servers {len(up)}/{len(slots)} in"
    if out:
        head += " (out: " + ", ".join(f"{s.url} for {s.out_for(now):.0f} s" for s in out) + ")"
    if not up:
        return head
    if len(up) <= STATUS_NAMED:
        flight = ", ".join(f"{s.url} {s.in_flight}" for s in up)
    else:
        counts = [s.in_flight for s in up]
        flight = f"{min(counts)}-{max(counts)} per server"
    return f"{head}; in flight {flight}"


def summary_lines(slots: Sequence[Slot], now: float) -> list[str]:
    """One line per server: requests sent and answered, and its time out, if any."""
    lines = ["by server:"]
    for slot in slots:
        line = f"  {slot.url}: {slot.sent:,} requests sent, {slot.answered:,} answered"
        if slot.outs:
            line += (
                f"; out {slot.outs} time{'s' if slot.outs > 1 else ''} ({slot.out_for(now):.0f} s), "
                f"{slot.moved:,} requests in flight on it sent again elsewhere"
            )
        if not slot.up:
            line += "; still out at the end"
        lines.append(line)
    return lines
