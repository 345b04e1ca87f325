"""The open-loop replayer: send each workload request at its scheduled time to a notary.

Open loop: a dispatcher walks the workload in order, sleeps until each request's intended
time (``Pacer``) and starts it as its own task; it never waits for a response before sending
the next one. Every request is bounded by the client timeout; the number in flight is bounded
by ``max_inflight`` (a request that would exceed it is recorded as ``not-sent/overload``
instead of delaying the schedule). Client-cache hits in the workload are recorded without
any network traffic.

Per request it records intended and actual send time, status or error kind (``connect``,
``reset``, ``timeout``, ``other``), latency, cache layer (from ``Cache-Status``) and bytes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import csv
import gc
import hashlib
import io
import json
import math
import signal
import ssl
import sys
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from replay.aggregate import RESULT_COLUMNS, ResultRow, classify_cache_status
from replay.errors import ReplayInputError, ReplayIOError
from replay.httpclient import Exchange, HTTPClient, HTTPClientError, Response
from replay.model import KIND_CLIENT_HIT, WorkloadEvent
from replay.pacer import LogHistogram, Pacer, ScheduleMonitor

ROUTES = ("round-robin", "client-hash")
START_LEAD = 0.05
BURST = 64  # requests sent back to back before the dispatcher yields to the loop
TIMER_STEP = 0.0005  # the shortest wait the event loop's timers do not round to zero
# allocations between young-generation collections during a run (CPython's default is 700)
GC_YOUNG = 20_000
WIRE_CACHE = 65_536  # encoded requests kept by (notary, host, port, fingerprint)


@contextlib.contextmanager
def collector_quiet() -> Iterator[None]:
    """Keep the cyclic garbage collector's pauses off the schedule during a run.

    A full collection walks every object the process holds: with a workload in memory it took
    18-22 ms at 20,000 requests/s here, twice the lateness budget. Objects that exist when the
    run starts (the workload, the modules) are moved out of the collector's sight
    (``gc.freeze``) and young collections happen every ``GC_YOUNG`` allocations instead of 700;
    both are undone when the run ends. Nothing is leaked: garbage is still collected, only
    less often. A caller that froze objects itself keeps its own freeze.
    """
    thresholds = gc.get_threshold()
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    gc.set_threshold(max(thresholds[0], GC_YOUNG), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if froze:
            gc.unfreeze()


@dataclass(frozen=True)
class RunConfig:
    notaries: tuple[str, ...]
    speed: float = 1.0
    timeout: float = 10.0
    connect_timeout: float = 5.0
    max_inflight: int = 20_000
    connections: int = 512
    # connections opened per notary before the schedule starts (at most ``connections``)
    warm_connections: int = 32
    route: str = "round-robin"
    insecure: bool = False
    pin_sha256: bytes | None = None
    spin: float = 0.0  # >0: yield-wait the last `spin` seconds before a send (a busy wait)
    limit: int | None = None
    max_duration: float | None = None
    progress_interval: float = 1.0
    behind_threshold: float = 0.05
    method: str = "POST"

    def validate(self) -> None:
        if not self.notaries:
            raise ReplayInputError("at least one notary URL is needed")
        for url in self.notaries:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ReplayInputError(f"bad notary URL {url!r}")
        if self.route not in ROUTES:
            raise ReplayInputError(f"route must be one of {ROUTES}")
        if self.timeout <= 0 or self.max_inflight < 1 or self.connections < 1:
            raise ReplayInputError("timeout, max-inflight and connections must be positive")
        if self.warm_connections < 0:
            raise ReplayInputError("warm connections must be 0 or more")
        if self.method not in ("POST", "GET"):
            raise ReplayInputError("method must be POST or GET")
        if self.limit is not None and self.limit < 0:
            raise ReplayInputError("limit must be 0 or more")
        if self.max_duration is not None and not self.max_duration >= 0:
            raise ReplayInputError("max duration must be 0 or more seconds")
        if not 0 <= self.spin <= 1:
            raise ReplayInputError("spin must be between 0 and 1000 ms")


@dataclass
class RunSummary:
    events: int = 0
    requests: int = 0
    client_hits: int = 0
    sent: int = 0
    completed: int = 0
    not_sent: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[int, int] = field(default_factory=dict)
    lateness_p50: float = 0.0
    lateness_p99: float = 0.0
    lateness_max: float = 0.0
    behind: int = 0
    wall_seconds: float = 0.0
    stopped_early: bool = False
    speed: float = 1.0

    def as_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["statuses"] = {str(k): v for k, v in self.statuses.items()}
        return d


class ResultWriter:
    """Streams result rows to a CSV file (header first), in the ``csv`` module's dialect
    (``QUOTE_MINIMAL``, ``\\n`` line ends); flushes every ``flush_every`` rows, and at
    :meth:`flush` (a replay run calls it when it ends).

    :meth:`request` is the hot path: one ``%`` format per row, text fields escaped through a
    cache (a workload repeats its clients, sites and notaries), lines joined into one write
    per ``_BATCH`` rows. It writes the bytes ``csv.writer`` would write for
    :meth:`ResultRow.as_row`, and took 1.2 us a row where ``csv.writer`` took 3.0 (a
    micro-benchmark; in a replay at 20,000/s it saved about 1 us of the sender's 24-30).
    """

    _LINE = "%d,%s,%s,%s,%d,%s,%.6f,%.6f,%s,%s,%s,%s,%s,%d,%d,%d,%s\n"
    _ESCAPED_MAX = 65_536  # escaped text fields kept (then forgotten, and found again)
    # rows joined into one write to the file object: about the 8 KB of its buffer
    _BATCH = 64

    def __init__(self, fh: TextIO, flush_every: int = 1000) -> None:
        self._fh = fh
        self._w = csv.writer(fh, lineterminator="\n")
        self._w.writerow(RESULT_COLUMNS)
        self._n = 0
        self._flush_every = flush_every
        self._lines: list[str] = []
        self._escaped: dict[str, str] = {}

    def write(self, row: ResultRow) -> None:
        """One row, written at once (not held for the next flush)."""
        self.flush()
        self.write_fields(row.as_row())

    def write_fields(self, fields: list[str]) -> None:
        """A row already formatted as :meth:`ResultRow.as_row` formats it."""
        self.flush()
        self._w.writerow(fields)
        self._n += 1
        if self._n % self._flush_every == 0:
            self._fh.flush()

    def _text(self, value: str) -> str:
        """``value`` as ``csv.writer`` writes it in a row of several fields."""
        got = self._escaped.get(value)
        if got is None:
            if '"' in value or "," in value or not value.isprintable():
                one = io.StringIO()
                csv.writer(one, lineterminator="\n").writerow([value])
                got = one.getvalue()[:-1]
            else:
                got = value
            if len(self._escaped) >= self._ESCAPED_MAX:
                self._escaped.clear()
            self._escaped[value] = got
        return got

    def request(self, seq: int, kind: str, client: str, host: str, port: int, notary: str,
                intended: float, actual: float, status: int | None, error: str,
                latency: float | None, layer: str, cache_status: str, bytes_sent: int,
                bytes_received: int, ssl_bytes: int, wire: float | None) -> None:
        """One row from its values (the fields of :class:`ResultRow`, in order), held until
        the next flush."""
        text = self._text
        lines = self._lines
        lines.append(self._LINE % (
            seq, text(kind), text(client), text(host), port, text(notary), intended, actual,
            "" if status is None else status, text(error),
            "" if latency is None else f"{latency:.6f}", text(layer), text(cache_status),
            bytes_sent, bytes_received, ssl_bytes, "" if wire is None else f"{wire:.6f}"))
        if len(lines) >= self._BATCH:
            self._write_held()

    def _write_held(self) -> None:
        n = len(self._lines)
        self._fh.write("".join(self._lines))
        self._lines.clear()
        before = self._n
        self._n += n
        if self._n // self._flush_every != before // self._flush_every:
            self._fh.flush()

    def flush(self) -> None:
        """Write the rows held and flush the file."""
        if self._lines:
            self._write_held()
        self._fh.flush()


def error_kind(exc: BaseException) -> str:
    """Map a client failure to ``connect`` / ``reset`` / ``timeout`` / ``tls`` / ``other``."""
    if isinstance(exc, HTTPClientError):
        return exc.kind if exc.kind in ("connect", "reset", "timeout", "tls") else "other"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "reset"
    return "other"


def tls_context(config: RunConfig) -> ssl.SSLContext | None:
    """Client TLS for https notaries: verified by default; unverified with ``insecure``;
    a pinned certificate is checked by its SHA-256 after an unverified handshake."""
    if not (config.insecure or config.pin_sha256):
        return None
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_pin_from_cert(pem_or_der: bytes) -> bytes:
    """A pin (SHA-256 of the DER certificate) from a PEM or DER certificate file's bytes."""
    der = pem_or_der
    if b"-----BEGIN" in pem_or_der:
        der = ssl.PEM_cert_to_DER_cert(pem_or_der.decode("ascii", "replace"))
    return hashlib.sha256(der).digest()


def tls_pin_from_server(url: str, expect_sha1: str | None, timeout: float = 5.0) -> bytes:
    """Fetch a notary's certificate and pin it; if ``expect_sha1`` is given (the
    ``pin_sha1`` the operator published), the certificate must match it."""
    u = urlsplit(url)
    if u.scheme != "https" or not u.hostname:
        raise ReplayInputError(f"pinning needs an https URL, got {url!r}")
    try:
        pem = ssl.get_server_certificate((u.hostname, u.port or 443), timeout=timeout)
    except (OSError, ssl.SSLError) as exc:
        raise ReplayIOError(f"cannot fetch the certificate of {url}: {exc}") from exc
    der = ssl.PEM_cert_to_DER_cert(pem)
    if expect_sha1 is not None:
        got = hashlib.sha1(der).hexdigest()
        want = expect_sha1.replace(":", "").strip().lower()
        if got != want:
            raise ReplayInputError(f"{url}: certificate SHA-1 {got} does not match pin {want}")
    return hashlib.sha256(der).digest()


class Replayer:
    """One replay run. Send times come from ``time.perf_counter`` (sub-microsecond)."""

    def __init__(self, config: RunConfig, writer: ResultWriter,
                 log: Callable[[str], None] | None = None) -> None:
        config.validate()
        self.config = config
        self.writer = writer
        self.log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        self.summary = RunSummary()
        self.monitor = ScheduleMonitor(threshold=config.behind_threshold)
        self._inflight: set[asyncio.Task[None]] = set()
        self._fast = 0  # requests in flight on the callback path
        self._deadlines: collections.deque[tuple[float, Exchange]] = collections.deque()
        self._task_deadlines: collections.deque[tuple[float, asyncio.Task[None]]] = \
            collections.deque()
        self._timed_out: set[asyncio.Task[None]] = set()
        self._layers: dict[str, str] = {}
        self._wire: dict[tuple[str, str, int, str], tuple[str, bytes]] = {}
        self._rr = 0
        self._stopping = False
        self._bases = [u.rstrip("/") for u in config.notaries]

    def _notary_for(self, ev: WorkloadEvent) -> str:
        n = len(self._bases)
        if n == 1:
            return self._bases[0]
        if self.config.route == "client-hash":
            return self._bases[zlib.crc32(ev.client.encode()) % n]
        self._rr = (self._rr + 1) % n
        return self._bases[self._rr]

    def _request(self, ev: WorkloadEvent) -> tuple[str, str, bytes]:
        method = self.config.method if ev.fingerprint else "GET"
        body = f"fingerprint={ev.fingerprint}".encode() if method == "POST" else b""
        return method, f"/target/{ev.host}+{ev.port}", body

    def _encoded(self, client: HTTPClient, base: str, ev: WorkloadEvent) -> tuple[str, bytes]:
        """The method and bytes of ``ev``'s request to ``base``, kept by what they depend on
        (a workload asks about a site many times; building and hashing the path and body
        anew cost more than the lookup)."""
        key = (base, ev.host, ev.port, ev.fingerprint)
        got = self._wire.get(key)
        if got is None:
            method, path, body = self._request(ev)
            got = (method, client.encode(base, method, path, body))
            if len(self._wire) >= WIRE_CACHE:
                self._wire.clear()
            self._wire[key] = got
        return got

    def _dispatch(self, client: HTTPClient, seq: int, ev: WorkloadEvent, intended: float,
                  start: float) -> None:
        """Send one request now: on an idle keep-alive connection straight from here (no
        task, no per-request timer: the sweeper enforces the timeout; the answer comes to
        :meth:`_done`), else as a task that connects or waits for a connection."""
        base = self._notary_for(ev)
        method, data = self._encoded(client, base, ev)
        actual = time.perf_counter()
        ex = client.start_encoded(base, method, data, self._done,
                                  (client, seq, ev, intended, start, base, actual))
        if ex is None:
            self._spawn(self._send(client, seq, ev, intended, start, base, None))
            return
        warning = self.monitor.observe(actual - intended, actual)
        if warning is not None:
            self.log(f"warning: {warning}")
        self._fast += 1
        self._deadlines.append((actual + self.config.timeout, ex))

    def _done(self, resp: Response | None, exc: HTTPClientError | None, stale: bool,
              context: tuple[HTTPClient, int, WorkloadEvent, float, float, str, float],
              ) -> None:
        """The answer (or failure) of a request sent by :meth:`_dispatch`."""
        self._fast -= 1
        client, seq, ev, intended, start, base, actual = context
        if stale:  # a kept-alive connection the server had closed: once more, fresh
            self._spawn(self._send(client, seq, ev, intended, start, base, actual))
            return
        self._record(seq, ev, intended, start, actual, base, resp,
                     "" if exc is None else error_kind(exc))

    def _spawn(self, coro: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _sweep(self) -> None:
        """Time out requests, on the callback path and as tasks: one timer for all of them
        (a task past its deadline is cancelled and records a timeout)."""
        timeout_error = HTTPClientError("timeout", "no answer in time")
        interval = min(0.05, self.config.timeout / 10)
        deadlines = self._deadlines
        tasks = self._task_deadlines
        clock = time.perf_counter
        while True:
            await asyncio.sleep(interval)
            now = clock()
            while deadlines and deadlines[0][0] <= now:
                deadlines.popleft()[1].fail(timeout_error)
            while deadlines and deadlines[0][1].finished:
                deadlines.popleft()
            while tasks and tasks[0][0] <= now:
                task = tasks.popleft()[1]
                if not task.done():
                    self._timed_out.add(task)
                    task.cancel()
            while tasks and tasks[0][1].done():
                tasks.popleft()

    async def _send(self, client: HTTPClient, seq: int, ev: WorkloadEvent,
                    intended: float, start: float, base: str, actual: float | None) -> None:
        clock = time.perf_counter
        if actual is None:
            actual = clock()
            self._observe(actual - intended, actual)
        method, path, body = self._request(ev)
        resp: Response | None = None
        err = ""
        task = asyncio.current_task()
        assert task is not None
        self._task_deadlines.append((actual + self.config.timeout, task))
        try:
            resp = await client.request(base, method, path, body)
        except (HTTPClientError, TimeoutError, OSError) as exc:
            err = error_kind(exc)
        except asyncio.CancelledError:
            if task not in self._timed_out:
                raise
            self._timed_out.discard(task)
            task.uncancel()
            err = "timeout"
        self._record(seq, ev, intended, start, actual, base, resp, err)

    def _record(self, seq: int, ev: WorkloadEvent, intended: float, start: float,
                actual: float, base: str, resp: Response | None, err: str) -> None:
        latency = time.perf_counter() - actual
        s = self.summary
        s.completed += 1
        status: int | None = None
        layer = cache_status = ""
        sent = received = 0
        wire: float | None = None
        if resp is not None:
            status = resp.status
            cache_status = resp.headers.get("cache-status", "")
            layer = self._layers.get(cache_status) or classify_cache_status(cache_status)
            if len(self._layers) < 256:
                self._layers[cache_status] = layer
            sent, received, wire = resp.bytes_sent, resp.bytes_received, resp.wire - start
            s.statuses[status] = s.statuses.get(status, 0) + 1
        if err:
            s.errors[err] = s.errors.get(err, 0) + 1
        self.writer.request(seq, ev.kind, ev.client, ev.host, ev.port, base, intended - start,
                            actual - start, status, err, latency, layer, cache_status, sent,
                            received, ev.ssl_bytes, wire)

    def _observe(self, lateness: float, now: float) -> None:
        warning = self.monitor.observe(lateness, now)
        if warning is not None:
            self.log(f"warning: {warning}")

    def _record_local(self, seq: int, ev: WorkloadEvent, intended: float, start: float,
                      error: str) -> None:
        layer = "client" if ev.kind == KIND_CLIENT_HIT else ""
        latency = 0.0 if ev.kind == KIND_CLIENT_HIT else None
        self.writer.request(seq, ev.kind, ev.client, ev.host, ev.port, "", intended - start,
                            intended - start, None, error, latency, layer, "", 0, 0,
                            ev.ssl_bytes, None)

    async def _progress(self, start: float) -> None:
        last_sent = 0
        while True:
            await asyncio.sleep(self.config.progress_interval)
            s = self.summary
            w = self.monitor.take_window()
            rate = (s.sent - last_sent) / self.config.progress_interval
            last_sent = s.sent
            self.log(f"[{time.perf_counter() - start:7.1f}s] events {s.events} sent {s.sent} "
                     f"({rate:.0f}/s) done {s.completed} "
                     f"in-flight {len(self._inflight) + self._fast} "
                     f"client-hits {s.client_hits} errors {sum(s.errors.values())} "
                     f"late p99 {w.quantile(0.99) * 1000:.1f} ms")

    def stop(self) -> None:
        """Stop dispatching (e.g. on SIGINT); requests in flight are still awaited."""
        self._stopping = True

    async def _until(self, when: float) -> None:
        """Sleep until ``when`` (perf_counter): a timer for most of the wait, then yield to
        the loop until due, since loop timers fire up to a few milliseconds late."""
        clock = time.perf_counter
        delay = when - clock()
        spin = self.config.spin
        if spin <= 0:
            # timers only: the loop's timers have millisecond steps and a wait under half a
            # millisecond rounds to none, so it gets one step (sent up to ~1 ms late, no
            # busy wait)
            if delay > 0:
                await asyncio.sleep(max(delay, TIMER_STEP))
            return
        if delay > spin:
            await asyncio.sleep(delay - spin)
        while clock() < when and not self._stopping:
            await asyncio.sleep(0)

    async def run(self, events: Iterable[WorkloadEvent], share: tuple[int, int] | None = None,
                  gate: Callable[[], Awaitable[float]] | None = None) -> RunSummary:
        """Replay ``events``. ``share`` (index, count): send only the events whose sequence
        number is ``index`` modulo ``count`` (one of several sender processes; rows keep the
        run's sequence numbers). ``gate``: awaited once the connections are warm; it returns
        the schedule's start (a ``time.perf_counter`` value, the same clock in every process
        of the machine), so that several senders keep one schedule."""
        if share is not None and not (share[1] >= 1 and 0 <= share[0] < share[1]):
            raise ReplayInputError(f"share {share!r}: need 0 <= index < count")
        try:
            with collector_quiet():
                return await self._run(events, share, gate)
        finally:
            self.writer.flush()

    async def _run(self, events: Iterable[WorkloadEvent], share: tuple[int, int] | None,
                   gate: Callable[[], Awaitable[float]] | None) -> RunSummary:
        cfg = self.config
        clock = time.perf_counter
        client = HTTPClient(cfg.connections, tls_context(cfg), cfg.pin_sha256,
                            cfg.connect_timeout)
        wall0 = time.monotonic()
        if cfg.warm_connections:
            # before the schedule's clock starts: a cold pool made the first requests each
            # wait for a connect (at 20,000/s with a CPU burner beside, the first 30-90 ms of
            # a run went out up to 32 ms late; docs/replay.md)
            try:
                await client.warm(self._bases, cfg.warm_connections)
            except BaseException:
                client.close()
                raise
        try:
            start = clock() + START_LEAD if gate is None else await gate()
        except BaseException:
            client.close()
            raise
        index, count = share if share is not None else (0, 1)
        pacer = Pacer(start, cfg.speed)
        progress = (asyncio.create_task(self._progress(start))
                    if cfg.progress_interval > 0 else None)
        sweeper = asyncio.create_task(self._sweep())
        s = self.summary
        burst = 0
        # the loop's invariants as locals (it runs once per event)
        limit = cfg.limit if cfg.limit is not None else -1
        max_duration = cfg.max_duration if cfg.max_duration is not None else math.inf
        intended_of = pacer.intended
        inflight = self._inflight
        max_inflight = cfg.max_inflight
        try:
            for seq, ev in enumerate(events):
                if self._stopping or seq == limit:
                    s.stopped_early = True
                    break
                if count > 1 and seq % count != index:
                    continue
                intended = intended_of(ev.offset)
                if intended - start > max_duration:
                    s.stopped_early = True
                    break
                s.events += 1
                if ev.kind == KIND_CLIENT_HIT:
                    # no traffic: recorded at its intended time without waiting for it
                    s.client_hits += 1
                    self._record_local(seq, ev, intended, start, "")
                    continue
                if clock() < intended:
                    await self._until(intended)
                    burst = 0
                elif burst >= BURST:
                    # behind or exactly on time for many in a row: let the loop read answers
                    await asyncio.sleep(0)
                    burst = 0
                burst += 1
                s.requests += 1
                if len(inflight) + self._fast >= max_inflight:
                    s.not_sent += 1
                    s.errors["overload"] = s.errors.get("overload", 0) + 1
                    self._record_local(seq, ev, intended, start, "overload")
                    continue
                s.sent += 1
                self._dispatch(client, seq, ev, intended, start)
            deadline = clock() + cfg.timeout + 5
            while (self._inflight or self._fast) and clock() < deadline:
                if self._inflight:
                    await asyncio.wait(set(self._inflight), timeout=0.05)
                else:
                    await asyncio.sleep(0.01)
            for t in list(self._inflight):
                t.cancel()
            while self._deadlines:
                self._deadlines.popleft()[1].fail(HTTPClientError("timeout", "run ended"))
        finally:
            sweeper.cancel()
            client.close()
            if progress is not None:
                progress.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await progress
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        s.lateness_p50 = self.monitor.lateness.quantile(0.5)
        s.lateness_p99 = self.monitor.lateness.quantile(0.99)
        s.lateness_max = self.monitor.lateness.max
        s.behind = self.monitor.behind
        s.wall_seconds = time.monotonic() - wall0
        s.speed = cfg.speed
        return s


def open_results(path: Path) -> TextIO:
    """A results file opened for writing, or a clear error."""
    try:
        return path.open("w", encoding="utf-8", newline="")
    except OSError as exc:
        raise ReplayIOError(f"cannot write {path}: {exc}") from exc


def stop_on_signals(replayer: Replayer) -> Callable[[], None]:
    """SIGINT and SIGTERM stop ``replayer``'s dispatch (the run finishes cleanly with what
    was sent); returns the undo."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, replayer.stop)

    def undo() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

    return undo


async def replay_file(events: Iterable[WorkloadEvent], config: RunConfig, results: Path,
                      log: Callable[[str], None] | None = None,
                      handle_signals: bool = False) -> RunSummary:
    """Run a replay and stream its results to ``results`` (CSV); write a summary JSON next
    to it (``<results>.summary.json``). With ``handle_signals``, SIGINT/SIGTERM stop the
    dispatch and the run finishes cleanly with what was sent."""
    with open_results(results) as fh:
        replayer = Replayer(config, ResultWriter(fh), log)
        undo = stop_on_signals(replayer) if handle_signals else None
        try:
            summary = await replayer.run(events)
        finally:
            if undo is not None:
                undo()
    results.with_name(results.name + ".summary.json").write_text(
        json.dumps(summary.as_dict(), indent=2) + "\n", encoding="utf-8")
    return summary


def lateness_histogram(rows: Iterable[ResultRow]) -> LogHistogram:
    h = LogHistogram()
    for r in rows:
        if r.kind != KIND_CLIENT_HIT and r.error != "overload":
            h.add(max(0.0, r.actual - r.intended))
    return h
