"""Answered requests are counted without a counter increment per request and show in the
exposition when it is read, with failures counted at once beside them."""

from __future__ import annotations

from notary.errors import BadInput
from notary.metrics import Metrics


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{series} not in the exposition")


def test_answered_counts_appear_when_read() -> None:
    m = Metrics()
    before = m.exposition().decode()
    assert _value(before, 'notary_requests_total{status="200"}') == 0  # twin: none yet
    for _ in range(3):
        m.answered(200, "hit")
    m.answered(409, "miss")
    m.answered(299, "stale")  # a status outside the fixed set is "other"
    m.failed(BadInput("x"), 400)
    text = m.exposition().decode()
    expected = {'notary_requests_total{status="200"}': 3, 'notary_requests_total{status="409"}': 1,
                'notary_requests_total{status="other"}': 1,
                'notary_requests_total{status="400"}': 1,
                'notary_cache_total{result="hit"}': 3, 'notary_cache_total{result="stale"}': 1}
    assert {series: _value(text, series) for series in expected} == expected
    m.answered(200, "hit")
    again = m.exposition().decode()  # counted once each: nothing added twice
    assert _value(again, 'notary_requests_total{status="200"}') == 4
    assert _value(again, 'notary_cache_total{result="miss"}') == 1
