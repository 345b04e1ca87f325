"""Store failures as the operator sees them: once, then counted, then a recovery line.

A dead Redis or a full disk fails every request that needs the store. Logging each would
grow the log by a line per request; logging none (as before) hid the outage. Rules:

* the first failure after a healthy period is one WARNING line with its text;
* while failures go on, at most one WARNING line per :data:`PERIOD` seconds with how many
  there were since the last line (and the first text again);
* the first success after failures is one WARNING line: recovered, after how many failures
  in how long.

Clients never see these texts: they get a neutral 503 (notary/web.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

PERIOD = 60.0
log = logging.getLogger("notary.store")


class FailureLog:
    def __init__(
        self, what: str = "store", period: float = PERIOD,
        clock: Callable[[], float] = time.monotonic, logger: logging.Logger = log,
    ) -> None:
        self.what = what
        self.period = period
        self._clock = clock
        self._log = logger
        self._since: float | None = None  # when the current outage began
        self._first = ""
        self._total = 0
        self._window = 0
        self._reported = 0.0
        self.failures = 0  # every failure seen, for metrics

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, text: str) -> None:
        now = self._clock()
        self.failures += 1
        if self._since is None:
            self._since, self._first, self._total, self._window = now, text, 1, 0
            self._reported = now
            self._log.warning("%s failing: %s (further failures are counted: one line a "
                              "minute, and one when it works again)", self.what, text)
            return
        self._total += 1
        self._window += 1
        if now - self._reported >= self.period:
            self._log.warning("%s still failing: %d failures in the last %.0f s (first: %s)",
                              self.what, self._window, now - self._reported, self._first)
            self._window, self._reported = 0, now

    def ok(self) -> None:
        if self._since is None:
            return
        self._log.warning("%s recovered after %d failures in %.0f s", self.what, self._total,
                          self._clock() - self._since)
        self._since = None


__all__ = ["PERIOD", "FailureLog"]
