"""The pacer (pure) and the open-loop replayer against real local HTTP servers."""

from __future__ import annotations

import asyncio
import collections
import csv
import gc
import io
import math
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from replay_support import free_port

from replay.aggregate import RESULT_COLUMNS, ResultRow
from replay.errors import ReplayInputError
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, WorkloadEvent
from replay.pacer import LogHistogram, Pacer, ScheduleMonitor
from replay.runner import GC_YOUNG, Replayer, ResultWriter, RunConfig, replay_file


def test_pacer_schedule_ignores_everything_but_offset_and_speed() -> None:
    p = Pacer(start=100.0, speed=2.0)
    assert p.intended(10.0) == 105.0
    assert p.wait(10.0, now=104.0) == 1.0
    assert p.wait(10.0, now=106.0) == 0.0
    with pytest.raises(ReplayInputError):
        Pacer(0.0, speed=0.0)
    with pytest.raises(ReplayInputError):
        Pacer(0.0, speed=math.inf)


def test_log_histogram_quantiles_within_two_percent() -> None:
    h = LogHistogram()
    for i in range(1, 10001):
        h.add(i / 1000.0)
    assert h.quantile(0.5) == pytest.approx(5.0, rel=0.02)
    assert h.quantile(0.99) == pytest.approx(9.9, rel=0.02)
    assert h.max == 10.0 and h.n == 10000
    assert LogHistogram().quantile(0.5) == 0.0


def test_schedule_monitor_warns_rate_limited() -> None:
    m = ScheduleMonitor(threshold=0.05, interval=5.0)
    assert m.observe(0.01, now=0.0) is None
    assert m.observe(0.2, now=1.0) is not None
    assert m.observe(0.3, now=2.0) is None      # within the interval: counted, not repeated
    assert m.observe(0.3, now=7.0) is not None
    assert m.behind == 3


def _events(n: int, spacing: float, kind: str = KIND_REQUEST) -> list[WorkloadEvent]:
    return [WorkloadEvent(i * spacing, kind, f"c{i % 3}", f"s{i}.test", 443, "AA:BB", 1000)
            for i in range(n)]


@pytest.fixture()
async def slow_server() -> AsyncIterator[tuple[str, list[float]]]:
    """A notary stand-in whose every answer takes 1 s; records arrival times."""
    arrivals: list[float] = []
    loop = asyncio.get_running_loop()

    async def target(request: web.Request) -> web.Response:
        arrivals.append(loop.time())
        await request.read()
        await asyncio.sleep(1.0)
        return web.Response(text="{}", headers={"Cache-Status": "converge-notary; hit"})

    app = web.Application()
    app.router.add_route("*", "/target/{t}", target)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", arrivals
    await runner.cleanup()


def _rows(buf: io.StringIO) -> list[ResultRow]:
    buf.seek(0)
    reader = csv.reader(buf)
    next(reader)
    return [ResultRow.from_row(r) for r in reader]


async def test_open_loop_slow_server_does_not_delay_later_sends(
        slow_server: tuple[str, list[float]]) -> None:
    url, arrivals = slow_server
    buf = io.StringIO()
    cfg = RunConfig(notaries=(url,), timeout=5, progress_interval=0)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(20, 0.025))
    rows = _rows(buf)
    assert summary.sent == 20 and summary.completed == 20
    assert all(r.status == 200 and r.layer == "notary-hit" for r in rows)
    # every request went out before the first answer came back (answers take 1 s)
    first_answer = min(r.actual + (r.latency or 0) for r in rows)
    assert max(r.actual for r in rows) < first_answer
    # loose bound: the machine is shared; the benchmark measures lateness properly
    assert max(r.actual - r.intended for r in rows) < 0.25
    assert all(r.wire is not None and r.wire >= r.actual for r in rows)
    assert len(arrivals) == 20 and max(arrivals) - min(arrivals) < 0.9


async def test_inflight_bound_records_not_sent_instead_of_waiting(
        slow_server: tuple[str, list[float]]) -> None:
    url, _ = slow_server
    buf = io.StringIO()
    cfg = RunConfig(notaries=(url,), timeout=5, max_inflight=5, progress_interval=0)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(12, 0.01))
    rows = _rows(buf)
    assert summary.sent == 5 and summary.not_sent == 7
    skipped = [r for r in rows if r.error == "overload"]
    assert len(skipped) == 7
    # the schedule was kept: the later requests were recorded at their own intended times
    assert all(abs(r.actual - r.intended) < 1e-9 for r in skipped)


async def test_client_timeout_and_connect_errors(slow_server: tuple[str, list[float]]) -> None:
    url, _ = slow_server
    closed = f"http://127.0.0.1:{free_port()}"
    buf = io.StringIO()
    cfg = RunConfig(notaries=(url, closed), timeout=0.3, progress_interval=0)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(4, 0.01))
    assert summary.errors == {"timeout": 2, "connect": 2}
    rows = _rows(buf)
    assert {r.notary for r in rows} == {url, closed}  # round robin over both


async def test_client_hits_are_recorded_without_traffic(
        slow_server: tuple[str, list[float]], tmp_path: Path) -> None:
    url, arrivals = slow_server
    out = tmp_path / "results.csv"
    events = _events(3, 0.01, KIND_CLIENT_HIT)
    cfg = RunConfig(notaries=(url,), progress_interval=0)
    summary = await replay_file(events, cfg, out, log=lambda m: None)
    assert summary.client_hits == 3 and summary.sent == 0 and arrivals == []
    assert (tmp_path / "results.csv.summary.json").exists()


def _watched(events: list[WorkloadEvent],
             seen: list[tuple[int, int, bool]]) -> Iterator[WorkloadEvent]:
    """The events, noting the collector's state as the run takes each one."""
    for ev in events:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0], gc.isenabled()))
        yield ev


async def test_a_run_keeps_old_objects_from_the_collector_and_restores_it(
        tmp_path: Path) -> None:
    # objects older than the run are frozen and young collections are rarer while it runs
    # (a full collection over a workload in memory took twice the lateness budget); the
    # collector still runs, and is as it was once the run ends
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    seen: list[tuple[int, int, bool]] = []
    cfg = RunConfig(notaries=("http://127.0.0.1:9",), progress_interval=0)
    await replay_file(_watched(_events(3, 0.001, KIND_CLIENT_HIT), seen), cfg,
                      tmp_path / "r.csv", log=lambda m: None)
    assert len(seen) == 3
    assert all(frozen > 0 and young >= GC_YOUNG and enabled for frozen, young, enabled in seen)
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    # twin: outside a run nothing is frozen and young collections keep the caller's threshold
    outside = list(_watched(_events(1, 0.0), []))
    assert outside and gc.get_freeze_count() == 0 and gc.get_threshold()[0] < GC_YOUNG


async def test_a_callers_own_freeze_survives_a_run(tmp_path: Path) -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        cfg = RunConfig(notaries=("http://127.0.0.1:9",), progress_interval=0)
        await replay_file(_events(2, 0.001, KIND_CLIENT_HIT), cfg, tmp_path / "r.csv",
                          log=lambda m: None)
        # (a frozen object that dies leaves the count; an unfreeze would leave none)
        assert frozen > 0 and gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()


def test_run_config_rejects_bad_values() -> None:
    with pytest.raises(ReplayInputError):
        RunConfig(notaries=()).validate()
    with pytest.raises(ReplayInputError):
        RunConfig(notaries=("ftp://x",)).validate()
    with pytest.raises(ReplayInputError):
        RunConfig(notaries=("http://127.0.0.1:1",), route="random").validate()
    for spin in (-0.001, math.nan, 2.0):
        with pytest.raises(ReplayInputError):
            RunConfig(notaries=("http://127.0.0.1:1",), spin=spin).validate()
    RunConfig(notaries=("http://127.0.0.1:1",), spin=0.001).validate()  # twin
    for bad in ({"limit": -1}, {"max_duration": -0.5}, {"max_duration": math.nan}):
        with pytest.raises(ReplayInputError):
            RunConfig(notaries=("http://127.0.0.1:1",), **bad).validate()  # type: ignore[arg-type]
    RunConfig(notaries=("http://127.0.0.1:1",), limit=0, max_duration=0.0).validate()


@pytest.mark.parametrize(("limits", "sent"), [({"limit": 3}, 3), ({"max_duration": 0.025}, 3),
                                              ({"limit": 0}, 0), ({}, 10)])
async def test_limit_and_max_duration_end_the_run(limits: dict[str, float], sent: int) -> None:
    """``limit`` (events) and ``max_duration`` (schedule seconds) stop the run early; the
    twin without either replays all ten."""
    buf = io.StringIO()
    cfg = RunConfig(notaries=("http://127.0.0.1:1",), progress_interval=0,
                    **limits)  # type: ignore[arg-type]
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(
        _events(10, 0.01, KIND_CLIENT_HIT))
    assert summary.client_hits == sent and len(_rows(buf)) == sent
    assert summary.stopped_early == (sent < 10)


async def test_each_request_carries_its_own_event_to_its_own_notary() -> None:
    """Requests are encoded once per (notary, host, port, fingerprint) and reused: every
    request that arrives names its own event's site, fingerprint and method (GET when the
    event has no fingerprint), and the Host of the notary it was sent to."""
    seen: list[tuple[str, str, str, str]] = []

    async def target(request: web.Request) -> web.Response:
        seen.append((request.host, request.method, request.path, (await request.read()).decode()))
        return web.Response(text="{}", headers={"Cache-Status": "converge-notary; hit"})

    app = web.Application()
    app.router.add_route("*", "/target/{t}", target)
    runner = web.AppRunner(app)
    await runner.setup()
    ports = [free_port(), free_port()]
    for port in ports:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        # the notary alternates with i; each of host, port and fingerprint repeats on both
        events = [WorkloadEvent(i * 0.002, KIND_REQUEST, "c", f"s{i % 3}.test",
                                443 + (i // 6) % 2, "" if i % 5 == 0 else f"AA:{(i // 2) % 3:02X}",
                                0) for i in range(60)]
        cfg = RunConfig(notaries=tuple(f"http://127.0.0.1:{p}" for p in ports), timeout=5,
                        progress_interval=0)
        r = Replayer(cfg, ResultWriter(io.StringIO()), log=lambda m: None)
        summary = await r.run(events)
    finally:
        await runner.cleanup()
    assert summary.completed == 60 and summary.errors == {}
    want = collections.Counter(
        (f"127.0.0.1:{ports[(i + 1) % 2]}", "GET" if not ev.fingerprint else "POST",
         f"/target/{ev.host}+{ev.port}", f"fingerprint={ev.fingerprint}" if ev.fingerprint else "")
        for i, ev in enumerate(events))
    assert collections.Counter(seen) == want
    assert 0 < len(r._wire) < 60  # reused, not encoded per request


def test_client_hash_routing_keeps_a_client_on_one_notary() -> None:
    cfg = RunConfig(notaries=("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"),
                    route="client-hash")
    r = Replayer(cfg, ResultWriter(io.StringIO()), log=lambda m: None)
    events = [WorkloadEvent(0, KIND_REQUEST, f"c{i % 7}", "a.test", 443, "", 0)
              for i in range(70)]
    chosen: dict[str, set[str]] = {}
    for ev in events:
        chosen.setdefault(ev.client, set()).add(r._notary_for(ev))
    assert all(len(v) == 1 for v in chosen.values())
    assert len(set().union(*chosen.values())) > 1  # clients spread over the notaries
    rr = Replayer(RunConfig(notaries=cfg.notaries), ResultWriter(io.StringIO()),
                  log=lambda m: None)
    assert len({rr._notary_for(events[0]) for _ in range(3)}) == 3  # round robin: all three


REPLY = b"HTTP/1.1 200 OK\r\nCache-Status: converge-notary; hit\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture()
async def answer_then_hang() -> AsyncIterator[tuple[str, dict[str, int]]]:
    """A raw server that answers the first ``answer`` requests at once, then none."""
    stats = {"connections": 0, "requests": 0, "answer": 10**9}

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.buf = bytearray()
            stats["connections"] += 1

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while (end := self.buf.find(b"\r\n\r\n")) >= 0:
                head = bytes(self.buf[:end]).lower()
                length = int(head.split(b"content-length:")[1].split(b"\r\n")[0]) \
                    if b"content-length:" in head else 0
                if len(self.buf) < end + 4 + length:
                    return
                del self.buf[:end + 4 + length]
                stats["requests"] += 1
                if stats["requests"] <= stats["answer"]:
                    assert isinstance(self.transport, asyncio.WriteTransport)
                    self.transport.write(REPLY)

    port = free_port()
    server = await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}", stats
    server.close()
    await server.wait_closed()


async def test_kept_alive_requests_are_answered_and_counted(
        answer_then_hang: tuple[str, dict[str, int]]) -> None:
    url, stats = answer_then_hang
    buf = io.StringIO()
    cfg = RunConfig(notaries=(url,), timeout=5, progress_interval=0)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(300, 0.001))
    rows = _rows(buf)
    assert summary.sent == summary.completed == 300 and summary.errors == {}
    assert sorted(r.seq for r in rows) == list(range(300))
    assert all(r.status == 200 and r.layer == "notary-hit" and r.bytes_received == len(REPLY)
               and r.wire is not None and r.wire >= r.actual for r in rows)
    assert stats["requests"] == 300 and stats["connections"] < 300  # connections reused
    buf.seek(0)
    raw = list(csv.reader(buf))[1:]  # written as ResultRow.as_row() writes a row, exactly
    assert len(raw) == 300 and all(ResultRow.from_row(r).as_row() == r for r in raw)


async def test_kept_alive_request_without_answer_times_out_on_time(
        answer_then_hang: tuple[str, dict[str, int]]) -> None:
    url, stats = answer_then_hang
    stats["answer"] = 1
    buf = io.StringIO()
    # no warm connections: the second request goes on the first one's kept connection
    cfg = RunConfig(notaries=(url,), timeout=0.3, progress_interval=0, warm_connections=0)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(2, 0.1))
    rows = sorted(_rows(buf), key=lambda r: r.seq)
    assert summary.errors == {"timeout": 1} and stats["connections"] == 1
    assert rows[0].status == 200 and rows[1].error == "timeout"
    assert rows[1].latency is not None and 0.3 <= rows[1].latency < 1.0


def test_schedule_monitor_counts_the_run_and_the_window_alike() -> None:
    m = ScheduleMonitor(lateness=LogHistogram(min_value=1e-3))  # a layout of its own
    for v in (0.0, -1.0, 0.0005, 0.002, 0.02, 0.2):
        m.observe(v, now=0.0)
    w = m.take_window()
    assert m.window.n == 0 and m.window.min_value == 1e-3
    assert (w.n, w.max, w.quantile(0.99)) == (m.lateness.n, m.lateness.max,
                                              m.lateness.quantile(0.99))
    assert w.counts == m.lateness.counts and w.counts[-1] == 3  # 0, negative, under 1 ms
    assert w.mean == m.lateness.mean
    # a window given another layout still counts in its own buckets
    m.window = LogHistogram()
    for v in (0.0, -1.0, 0.0005, 0.002, 0.02, 0.2):
        m.observe(v, now=0.0)
    assert m.window.counts != m.lateness.counts and m.window.counts[-1] == 2
    assert m.window.n == 6 and m.window.max == 0.2
    # twin: a default-layout histogram of the same values puts 0.0005 s in a bucket of its own
    d = LogHistogram()
    for v in (0.0, -1.0, 0.0005, 0.002, 0.02, 0.2):
        d.add(v)
    assert d.counts != w.counts and d.counts[-1] == 2


@pytest.mark.parametrize("min_value", [1e-6, 1e-3])
def test_schedule_monitor_counts_what_log_histogram_add_counts(min_value: float) -> None:
    """The monitor counts both histograms inline (the replayer's hot path): the same buckets,
    count, total and maximum as :meth:`LogHistogram.add`, on the edges too (0, negative, not a
    number, exactly ``min_value``, just under it, large). The twin: one value off changes it."""
    rng = random.Random(7)
    values = [0.0, -1.0, math.nan, min_value, min_value * 0.999, 1e9] + \
        [rng.lognormvariate(-7, 3) * rng.choice((1, 1, -1)) for _ in range(3000)]
    m = ScheduleMonitor(lateness=LogHistogram(min_value=min_value), threshold=math.inf)
    ref = LogHistogram(min_value=min_value)
    for v in values:
        m.observe(v, now=0.0)
        ref.add(v)
    w = m.take_window()
    for h in (m.lateness, w):
        assert (h.counts, h.n, h.total, h.max) == (ref.counts, ref.n, ref.total, ref.max)
    ref.add(0.5)
    assert (m.lateness.counts, m.lateness.n) != (ref.counts, ref.n)


@pytest.mark.parametrize("warm", [0, 4])
async def test_a_run_opens_its_warm_connections_before_the_schedule(
        answer_then_hang: tuple[str, dict[str, int]], warm: int) -> None:
    """``warm_connections``: opened before the schedule's clock starts, then used by the
    requests; with 0 (the twin) a run opens one connection when its first request goes."""
    url, stats = answer_then_hang
    buf = io.StringIO()
    cfg = RunConfig(notaries=(url,), timeout=5, progress_interval=0, warm_connections=warm)
    summary = await Replayer(cfg, ResultWriter(buf), log=lambda m: None).run(_events(5, 0.02))
    rows = _rows(buf)
    assert summary.sent == summary.completed == 5 and summary.errors == {}
    assert stats["connections"] == max(1, warm) and stats["requests"] == 5
    # the warm-up is not charged to the schedule (loose: the machine is shared)
    assert max(r.actual - r.intended for r in rows) < 0.25


def test_run_config_refuses_negative_warm_connections() -> None:
    with pytest.raises(ReplayInputError, match="warm"):
        RunConfig(notaries=("http://127.0.0.1:1",), warm_connections=-1).validate()
    RunConfig(notaries=("http://127.0.0.1:1",), warm_connections=0).validate()  # twin


_TEXTS = ("", "c1", "s1.test", "a,b", 'say "hi"', "line\nbreak", "cr\rhere", "tab\there",
          "nul\x00", "é", "\u2028", " lead", "x" * 300)


def _random_rows(n: int, seed: int) -> list[ResultRow]:
    import random

    rnd = random.Random(seed)

    def t() -> str:
        return rnd.choice(_TEXTS)

    def opt(v: float) -> float | None:
        return None if rnd.random() < 0.3 else v

    return [ResultRow(rnd.randrange(10**9), t(), t(), t(), rnd.randrange(65536), t(),
                      rnd.uniform(0, 1e4), rnd.uniform(0, 1e4),
                      opt(rnd.randrange(100, 600)),  # type: ignore[arg-type]
                      t(), opt(rnd.uniform(0, 30)), t(), t(), rnd.randrange(10**6),
                      rnd.randrange(10**6), rnd.randrange(2**62), opt(rnd.uniform(0, 1e4)))
            for _ in range(n)]


def _fast_rows(rows: list[ResultRow], flush_every: int) -> str:
    buf = io.StringIO()
    w = ResultWriter(buf, flush_every=flush_every)
    for r in rows:
        w.request(r.seq, r.kind, r.client, r.host, r.port, r.notary, r.intended, r.actual,
                  r.status, r.error, r.latency, r.layer, r.cache_status, r.bytes_sent,
                  r.bytes_received, r.ssl_bytes, r.wire)
    w.flush()
    return buf.getvalue()


def test_result_writer_fast_path_writes_what_csv_writes() -> None:
    """``ResultWriter.request`` (one format per row, escapes cached) writes byte for byte
    what ``csv.writer`` writes for ``ResultRow.as_row``, for text with commas, quotes, line
    breaks, control characters and more, and the rows read back equal. Rows are held until
    ``flush_every`` of them or ``flush``; ``write`` keeps the order."""
    rows = _random_rows(3000, seed=7)
    want = io.StringIO()
    ref = csv.writer(want, lineterminator="\n")
    ref.writerow(RESULT_COLUMNS)
    for r in rows:
        ref.writerow(r.as_row())
    assert _fast_rows(rows, 1000) == want.getvalue()
    assert _fast_rows(rows, 7) == want.getvalue()
    # held, then written in order around a row written at once
    buf = io.StringIO()
    w = ResultWriter(buf, flush_every=100)
    r0, r1 = rows[:2]
    w.request(*(getattr(r0, c) for c in RESULT_COLUMNS))
    assert buf.getvalue().count("\n") == 1  # the header only
    w.write(r1)
    both = io.StringIO()
    csv.writer(both, lineterminator="\n").writerows([RESULT_COLUMNS, r0.as_row(), r1.as_row()])
    assert buf.getvalue() == both.getvalue()


def test_result_writer_fast_path_twin_unescaped_text_differs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin: without the escapes, a comma or a quote in a name breaks the row."""
    rows = [r for r in _random_rows(200, seed=8) if "," in r.host or '"' in r.client]
    assert rows
    want = io.StringIO()
    ref = csv.writer(want, lineterminator="\n")
    ref.writerow(RESULT_COLUMNS)
    for r in rows:
        ref.writerow(r.as_row())
    monkeypatch.setattr(ResultWriter, "_text", lambda self, value: value)
    assert _fast_rows(rows, 1000) != want.getvalue()
