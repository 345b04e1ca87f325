"""Pure aggregation of replay results into the study's tables and figure series.

Definitions (kept identical in docs/replay.md):
- Outcome (Table 1, notary requests only): ``200`` fingerprint confirmed, ``409`` mismatch,
  ``503`` target unreachable, ``other-http`` any other status, ``connection-error``
  (connect refused/failed, reset, dropped), ``client-timeout``, ``not-sent`` (the replayer's
  own in-flight bound was reached; never counted as a notary failure).
- Cache layer (Table 2, successful validations only: client-cache hits plus notary verdicts
  200/409): ``client``, ``notary-hit`` (``Cache-Status: ...; hit``), ``notary-miss``
  (``fwd=miss`` or ``fwd=stale``: the notary probed the site).
- Cache utilisation level L (Table 3) is reached at the first second from which every later
  second's notary-hit ratio (hits / verdicts in that second) stays >= L, as in the study,
  *and* from which the run goes on for at least the minimum hold (:func:`min_hold`: 10% of
  the run and 60 s of trace time, whichever is longer). Near the end of a run the study's
  rule is met trivially (the last seconds have nothing after them to fail), so a level held
  for less than the minimum hold is "not held", never a time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from replay.pacer import LogHistogram

OUTCOMES = ("200", "409", "503", "other-http", "connection-error", "client-timeout",
            "not-sent")
LAYERS = ("client", "notary-hit", "notary-miss")
LEVELS = (0.65, 0.70, 0.75, 0.80, 0.85, 0.90)
ERROR_KINDS = ("connect", "reset", "timeout", "overload", "other")

STUDY_TABLE1 = {"200": (423_438, 0.74), "503": (116_000, 0.20),
                "connection-error": (33_837, 0.06), "client-timeout": (803, 0.001)}
STUDY_TABLE2 = {"client": (1_580_087, 0.77), "notary-hit": (436_085, 0.21),
                "notary-miss": (38_704, 0.01)}
STUDY_TABLE3 = {0.65: 16, 0.70: 25, 0.75: 27, 0.80: 35, 0.85: 122, 0.90: 271}
STUDY_FIGURES = {"flows": 3_922_967, "named_flows": 2_139_632, "notary_requests": 574_078,
                 "mean_requests_per_s": 160, "mean_validations_per_s": 594,
                 "miss_latency_s": 0.5, "hit_latency_s": 0.2, "overhead": 0.0006}

RESULT_COLUMNS = ("seq", "kind", "client", "host", "port", "notary", "intended", "actual",
                  "status", "error", "latency", "layer", "cache_status", "bytes_sent",
                  "bytes_received", "ssl_bytes", "wire")


@dataclass(frozen=True, slots=True)
class ResultRow:
    """One workload event as replayed. Times are seconds since the run's start:
    ``intended`` (schedule), ``actual`` (the replayer dispatched it), ``wire`` (its request
    headers were written to a connection; later than ``actual`` when it waited for one)."""

    seq: int
    kind: str
    client: str
    host: str
    port: int
    notary: str
    intended: float
    actual: float
    status: int | None
    error: str
    latency: float | None
    layer: str
    cache_status: str
    bytes_sent: int
    bytes_received: int
    ssl_bytes: int
    wire: float | None = None

    def as_row(self) -> list[str]:
        return [str(self.seq), self.kind, self.client, self.host, str(self.port), self.notary,
                f"{self.intended:.6f}", f"{self.actual:.6f}",
                "" if self.status is None else str(self.status), self.error,
                "" if self.latency is None else f"{self.latency:.6f}", self.layer,
                self.cache_status, str(self.bytes_sent), str(self.bytes_received),
                str(self.ssl_bytes), "" if self.wire is None else f"{self.wire:.6f}"]

    @classmethod
    def from_row(cls, row: list[str]) -> ResultRow:
        if len(row) != len(RESULT_COLUMNS):
            raise ValueError(f"expected {len(RESULT_COLUMNS)} fields, got {len(row)}")
        return cls(int(row[0]), row[1], row[2], row[3], int(row[4]), row[5], float(row[6]),
                   float(row[7]), int(row[8]) if row[8] else None, row[9],
                   float(row[10]) if row[10] else None, row[11], row[12], int(row[13]),
                   int(row[14]), int(row[15]), float(row[16]) if row[16] else None)


def classify_cache_status(header: str | None) -> str:
    """The notary cache layer named by an RFC 9211 ``Cache-Status`` value, or ``unknown``."""
    if not header:
        return "unknown"
    params = [p.strip().lower() for p in header.split(";")[1:]]
    if "hit" in params:
        return "notary-hit"
    for p in params:
        if p.startswith("fwd="):
            return "notary-miss"
    return "unknown"


def outcome(row: ResultRow) -> str:
    if row.error:
        if row.error == "timeout":
            return "client-timeout"
        if row.error == "overload":
            return "not-sent"
        return "connection-error"
    if row.status in (200, 409, 503):
        return str(row.status)
    return "other-http"


@dataclass
class Aggregate:
    """Streaming aggregation of result rows (memory: per-second counters and histograms)."""

    requests: int = 0
    client_hits: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    layers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LAYERS, 0))
    unknown_layer_verdicts: int = 0
    latency: dict[str, LogHistogram] = field(default_factory=lambda: defaultdict(LogHistogram))
    lateness: LogHistogram = field(default_factory=LogHistogram)
    wire_lateness: LogHistogram = field(default_factory=LogHistogram)
    sent_per_s: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    scheduled_per_s: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    validations_per_s: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    outcome_per_s: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    layer_per_s: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    delay_sum_per_s: dict[tuple[int, str], float] = field(
        default_factory=lambda: defaultdict(float))
    notary_bytes: int = 0
    ssl_bytes: int = 0
    notaries: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # (host, port) -> [notary requests, 200s, 409s]: per-site.csv, the weights of the
    # restricted-root-store comparison (rootstore compare --requests)
    per_site: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    end: float = 0.0

    def add(self, r: ResultRow) -> None:
        sec = int(r.intended) if r.intended >= 0 else 0
        self.end = max(self.end, r.intended, r.actual + (r.latency or 0.0))
        self.validations_per_s[sec] += 1
        self.ssl_bytes += r.ssl_bytes
        if r.kind == "client-hit":
            self.client_hits += 1
            self.layers["client"] += 1
            self.layer_per_s[(sec, "client")] += 1
            return
        self.requests += 1
        self.scheduled_per_s[sec] += 1
        o = outcome(r)
        self.outcomes[o] += 1
        if r.error:
            self.errors[r.error] += 1
        if o == "not-sent":
            return
        site = self.per_site.get((r.host, r.port))
        if site is None:
            site = self.per_site[(r.host, r.port)] = [0, 0, 0]
        site[0] += 1
        site[1] += r.status == 200
        site[2] += r.status == 409
        asec = int(r.actual) if r.actual >= 0 else 0
        self.sent_per_s[asec] += 1
        self.notaries[r.notary] += 1
        self.lateness.add(max(0.0, r.actual - r.intended))
        if r.wire is not None:
            self.wire_lateness.add(max(0.0, r.wire - r.intended))
        self.notary_bytes += r.bytes_sent + r.bytes_received
        self.outcome_per_s[(asec, o)] += 1
        lat = r.latency if r.latency is not None else 0.0
        cond = "error"
        if o in ("200", "409"):
            layer = r.layer if r.layer in ("notary-hit", "notary-miss") else "unknown"
            if layer == "unknown":
                self.unknown_layer_verdicts += 1
            else:
                self.layers[layer] += 1
                self.layer_per_s[(asec, layer)] += 1
            cond = layer
        self.latency[cond].add(lat)
        self.latency["all"].add(lat)
        self.delay_sum_per_s[(asec, cond)] += lat
        self.delay_sum_per_s[(asec, "n:" + cond)] += 1

    def extend(self, rows: Iterable[ResultRow]) -> Aggregate:
        for r in rows:
            self.add(r)
        return self

    # -- tables ----------------------------------------------------------------------------
    def table1(self) -> list[tuple[str, int, float]]:
        total = self.requests or 1
        return [(o, self.outcomes[o], self.outcomes[o] / total) for o in OUTCOMES]

    def table2(self) -> list[tuple[str, int, float]]:
        total = sum(self.layers.values()) or 1
        return [(k, self.layers[k], self.layers[k] / total) for k in LAYERS]

    def hit_ratio_per_s(self) -> dict[int, float]:
        ratios = {}
        seconds = {s for (s, layer) in self.layer_per_s if layer in ("notary-hit", "notary-miss")}
        for s in seconds:
            hits = self.layer_per_s.get((s, "notary-hit"), 0)
            miss = self.layer_per_s.get((s, "notary-miss"), 0)
            ratios[s] = hits / (hits + miss)
        return ratios

    def table3(self, levels: Iterable[float] = LEVELS, speed: float = 1.0,
               ) -> list[tuple[float, int | None]]:
        """``(level, seconds)``; ``None`` when the level is not held to the end for the
        minimum hold (:func:`min_hold` of this run at ``speed``)."""
        return time_to_levels(self.hit_ratio_per_s(), levels, self.span(),
                              min_hold(self.span(), speed))

    def overhead(self, ssl_bytes: int | None = None) -> float | None:
        denom = ssl_bytes if ssl_bytes is not None else self.ssl_bytes
        return self.notary_bytes / denom if denom else None

    def span(self) -> int:
        """Seconds covered by the run (at least 1)."""
        return max(1, int(math.ceil(self.end)))


MIN_HOLD_SHARE = 0.10  # of the run
MIN_HOLD_TRACE_SECONDS = 60.0


def min_hold(span: float, speed: float = 1.0) -> float:
    """Seconds (of the run) a level must be held to the end to count as reached: 10% of the
    run's ``span`` and 60 s of trace time (``60 / speed`` run seconds), whichever is longer."""
    return max(MIN_HOLD_SHARE * span, MIN_HOLD_TRACE_SECONDS / (speed if speed > 0 else 1.0))


def time_to_levels(ratios: dict[int, float], levels: Iterable[float] = LEVELS,
                   end: float | None = None, hold: float = 0.0,
                   ) -> list[tuple[float, int | None]]:
    """For each level, the first second after which every ratio stays at or above it, if
    the run goes on for at least ``hold`` seconds after it (to ``end``, default: the last
    second with a ratio, plus one); else ``None`` (not held)."""
    seconds = sorted(ratios)
    stop = end if end is not None else (seconds[-1] + 1 if seconds else 0)
    out: list[tuple[float, int | None]] = []
    for level in levels:
        reached: int | None = None
        for s in reversed(seconds):
            if ratios[s] < level:
                break
            reached = s
        if reached is not None and stop - reached < hold:
            reached = None
        out.append((level, reached))
    return out


def bin_width(span_seconds: float) -> int:
    """Figure bin width: minutes for long runs, shorter for short ones."""
    if span_seconds >= 1200:
        return 60
    if span_seconds >= 120:
        return 10
    return 1


def bins(span: int, width: int) -> int:
    return max(1, math.ceil(span / width))


def binned(per_s: dict[int, int] | dict[int, float], width: int, span: int) -> list[float]:
    out = [0.0] * bins(span, width)
    for s, v in per_s.items():
        if 0 <= s // width < len(out):
            out[s // width] += v
    return out
