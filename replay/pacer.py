"""The open-loop pacer: when each request should be sent, and how late it was.

Pure: the caller passes the clock value. A request's intended send time depends only on the
schedule (``start + offset / speed``), never on how earlier requests fared; that is what keeps
a slow server from hiding its slowness (no coordinated omission).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from replay.errors import ReplayInputError

_log = math.log


@dataclass(frozen=True)
class Pacer:
    """Maps workload offsets to clock times. ``speed`` 2.0 replays twice as fast."""

    start: float
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ReplayInputError("speed must be a positive number")

    def intended(self, offset: float) -> float:
        return self.start + offset / self.speed

    def wait(self, offset: float, now: float) -> float:
        """Seconds to wait before sending (0 when due or late)."""
        return max(0.0, self.intended(offset) - now)


class LogHistogram:
    """Bounded-memory histogram of non-negative values with ~1% relative precision."""

    def __init__(self, min_value: float = 1e-6, growth: float = 1.01) -> None:
        self.min_value = min_value
        self.log_growth = math.log(growth)
        self.counts: dict[int, int] = {}
        self.n = 0
        self.total = 0.0
        self.max = 0.0

    def bucket(self, value: float) -> int:
        """The bucket of a value (non-negative; -1 below ``min_value``)."""
        if value < self.min_value:
            return -1
        return int(math.log(value / self.min_value) / self.log_growth)

    def add(self, value: float, bucket: int | None = None) -> None:
        """Count ``value`` (negative counts as 0); ``bucket``: its :meth:`bucket` when the
        caller already has it (one logarithm for two histograms of the same layout)."""
        v = value if value > 0.0 else 0.0
        b = self.bucket(v) if bucket is None else bucket
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n += 1
        self.total += v
        if v > self.max:
            self.max = v

    def merge(self, other: LogHistogram) -> None:
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.n += other.n
        self.total += other.total
        self.max = max(self.max, other.max)

    def _value(self, b: int) -> float:
        if b < 0:
            return 0.0
        return self.min_value * math.exp((b + 0.5) * self.log_growth)

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1); 0.0 for an empty histogram."""
        if self.n == 0:
            return 0.0
        rank = q * (self.n - 1)
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen > rank:
                return min(self._value(b), self.max)
        return self.max

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0


@dataclass
class ScheduleMonitor:
    """Tracks send lateness and decides when to warn that the sender is behind schedule.

    ``observe(lateness, now)`` returns a warning string at most once per ``interval`` seconds
    while lateness exceeds ``threshold``.
    """

    threshold: float = 0.05
    interval: float = 5.0
    lateness: LogHistogram = field(default_factory=LogHistogram)
    window: LogHistogram = field(default_factory=LogHistogram)
    behind: int = 0
    _last_warn: float = float("-inf")

    def __post_init__(self) -> None:
        self.window = self._new_window()

    def _new_window(self) -> LogHistogram:
        """An empty histogram with the run's layout (so one bucket number serves both)."""
        w = LogHistogram(self.lateness.min_value)
        w.log_growth = self.lateness.log_growth
        return w

    def observe(self, lateness: float, now: float) -> str | None:
        # once per request on the replayer's hot path: both histograms counted here, with one
        # logarithm, rather than through LogHistogram.add (three calls cost more than the
        # counting; test_replay_runner compares the two ways on the same values)
        h, w = self.lateness, self.window
        if lateness >= h.min_value:
            v = lateness
            b = int(_log(v / h.min_value) / h.log_growth)
        else:
            v = lateness if lateness > 0.0 else 0.0
            b = -1
        same = w.min_value == h.min_value and w.log_growth == h.log_growth
        for hist in (h, w) if same else (h,):
            counts = hist.counts
            counts[b] = counts.get(b, 0) + 1
            hist.n += 1
            hist.total += v
            if v > hist.max:
                hist.max = v
        if not same:
            w.add(v)
        if lateness <= self.threshold:
            return None
        self.behind += 1
        if now - self._last_warn < self.interval:
            return None
        self._last_warn = now
        return (f"behind schedule: a request went out {lateness * 1000:.0f} ms late "
                f"({self.behind} late by more than {self.threshold * 1000:.0f} ms so far)")

    def take_window(self) -> LogHistogram:
        w, self.window = self.window, self._new_window()
        return w
