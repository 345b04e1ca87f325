"""What the notary's logs may say about its clients.

A notary must not keep a record of which client asked about which site unless its operator
turns that on (``--log-client-addresses``). At default settings:

* Requests the HTTP parser rejects (malformed request lines, oversized heads, bad methods)
  are counted (``notary_malformed_requests`` with ``--metrics-listen``) and reported as one
  short WARNING line at most once per :data:`REPORT_PERIOD` seconds: how many, no address,
  no request line, no traceback. Without this, aiohttp logs each one at ERROR with a
  traceback that names the client and echoes what it sent, which also lets any client grow
  the log by kilobytes per request.
* Any other error aiohttp logs about a request (a failure of the notary itself) keeps its
  traceback, which we need to find the bug, but not the client's address.
* Our own loggers name targets only at DEBUG.

With ``--log-client-addresses`` nothing is redacted: aiohttp's lines come through unchanged
(malformed requests are still counted).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp.http_exceptions import HttpProcessingError

REPORT_PERIOD = 60.0
AIOHTTP_SERVER = "aiohttp.server"
_REQUEST_ERROR = "Error handling request"


class ClientPrivacyFilter(logging.Filter):
    """A filter for the ``aiohttp.server`` logger (see module rules)."""

    def __init__(
        self,
        period: float = REPORT_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        on_malformed: Callable[[], None] | None = None,
        *,
        redact: bool = True,
    ) -> None:
        super().__init__()
        self._redact = redact
        self._period = period
        self._clock = clock
        self._on_malformed = on_malformed
        self._pending = 0
        self._next_report = float("-inf")
        self.malformed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_REQUEST_ERROR):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        malformed = isinstance(exc, HttpProcessingError)
        if malformed:
            self.malformed += 1
            if self._on_malformed is not None:
                self._on_malformed()
        if not self._redact:
            return True
        if not malformed:
            record.msg = "Error handling a request (client address not logged)"
            record.args = ()
            return True
        self._pending += 1
        now = self._clock()
        if now < self._next_report:
            return False
        count, self._pending = self._pending, 0
        self._next_report = now + self._period
        record.msg = "%d malformed HTTP request(s) rejected (reported once per %g s, unnamed)"
        record.args = (count, self._period)
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.WARNING
        record.levelname = logging.getLevelName(logging.WARNING)
        return True


def install(filter_: ClientPrivacyFilter) -> Callable[[], None]:
    """Attach ``filter_`` to aiohttp's server logger; returns the function that detaches it."""
    logger = logging.getLogger(AIOHTTP_SERVER)
    logger.addFilter(filter_)
    return lambda: logger.removeFilter(filter_)


__all__ = ["REPORT_PERIOD", "ClientPrivacyFilter", "install"]
