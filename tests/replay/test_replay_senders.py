"""``replay run --senders N``: several real sender processes sharing one schedule, against a
real local HTTP server that counts what arrives."""

from __future__ import annotations

import asyncio
import collections
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from replay_support import REPLAY, free_port, wait_http

from replay.errors import ReplayInputError, ReplayIOError
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, WorkloadEvent
from replay.report import read_results
from replay.runner import RunConfig
from replay.senders import part_path, run_senders, sender_config
from replay.workload import write_workload


@pytest.fixture()
async def counting_server() -> AsyncIterator[tuple[str, collections.Counter[str]]]:
    """Answers at once; counts arrivals per path."""
    seen: collections.Counter[str] = collections.Counter()

    async def target(request: web.Request) -> web.Response:
        await request.read()
        seen[request.path] += 1
        return web.json_response({}, headers={"Cache-Status": "converge-notary; hit"})

    app = web.Application()
    app.router.add_route("*", "/target/{t}", target)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


def _workload(path: Path, n: int, gap: float, hits_every: int = 0) -> Path:
    events = [WorkloadEvent(i * gap, KIND_CLIENT_HIT if hits_every and i % hits_every == 0
                            else KIND_REQUEST, f"c{i % 7}", f"s{i}.test", 443, "AA:BB", 100)
              for i in range(n)]
    write_workload(events, path)
    return path


async def test_senders_share_one_schedule_and_every_event_goes_once(
        tmp_path: Path, counting_server: tuple[str, collections.Counter[str]]) -> None:
    """Three senders: every request arrives exactly once, every event has one row with its
    own sequence number, client hits are recorded once and sent never, the summary adds the
    senders up (with each sender's figures), and no part file is left."""
    url, seen = counting_server
    wl = _workload(tmp_path / "w.csv", 300, 0.002, hits_every=10)
    out = tmp_path / "r.csv"
    cfg = RunConfig(notaries=(url,), timeout=5, progress_interval=0)
    summary = await asyncio.to_thread(run_senders, wl, cfg, out, 3, quiet=True)
    rows = list(read_results(out))
    assert sorted(r.seq for r in rows) == list(range(300))
    assert sum(seen.values()) == 270 and set(seen.values()) == {1}
    hits = [r for r in rows if r.kind == KIND_CLIENT_HIT]
    assert len(hits) == 30 and all(r.notary == "" for r in hits)
    assert all(r.status == 200 for r in rows if r.kind == KIND_REQUEST)
    assert (summary.events, summary.sent, summary.completed, summary.client_hits) == \
        (300, 270, 270, 30)
    assert summary.statuses == {200: 270} and not summary.errors
    # one schedule: the sends of the three senders interleave in time
    assert max(r.actual - r.intended for r in rows) < 0.25
    doc = json.loads((tmp_path / "r.csv.summary.json").read_text())
    assert [s["index"] for s in doc["senders"]] == [0, 1, 2]
    assert sum(s["sent"] for s in doc["senders"]) == 270
    assert all(s["cpu_seconds"] > 0 for s in doc["senders"])
    assert not list(tmp_path.glob("*.part"))


async def test_one_sender_sends_only_its_share(
        tmp_path: Path, counting_server: tuple[str, collections.Counter[str]]) -> None:
    """The twin of the above, one level down: a sender given share (1, 3) sends events 1, 4,
    7... only; without the share it sends all of them."""
    from replay.runner import Replayer, ResultWriter
    from replay.workload import read_workload

    url, seen = counting_server
    wl = _workload(tmp_path / "w.csv", 30, 0.001)
    cfg = RunConfig(notaries=(url,), timeout=5, progress_interval=0)
    with (tmp_path / "a.csv").open("w") as fh:
        await Replayer(cfg, ResultWriter(fh), log=lambda m: None).run(read_workload(wl),
                                                                      share=(1, 3))
    assert sorted(r.seq for r in read_results(tmp_path / "a.csv")) == list(range(1, 30, 3))
    assert sorted(seen) == sorted(f"/target/s{i}.test+443" for i in range(1, 30, 3))
    for bad in ((3, 3), (-1, 3), (0, 0)):
        with pytest.raises(ReplayInputError, match="share"):
            await Replayer(cfg, ResultWriter(io.StringIO()), log=lambda m: None).run(
                read_workload(wl), share=bad)
    seen.clear()
    with (tmp_path / "b.csv").open("w") as fh:
        await Replayer(cfg, ResultWriter(fh), log=lambda m: None).run(read_workload(wl))
    assert len(seen) == 30


def test_sender_limits_are_divided() -> None:
    cfg = RunConfig(notaries=("http://127.0.0.1:1",), connections=512, warm_connections=32,
                    max_inflight=20_000)
    two = sender_config(cfg, 2)
    assert (two.connections, two.warm_connections, two.max_inflight) == (256, 32, 10_000)
    many = sender_config(cfg, 64)
    assert (many.connections, many.warm_connections, many.max_inflight) == (8, 8, 312)
    assert sender_config(dataclasses_replace(cfg, warm_connections=0), 4).warm_connections == 0


def dataclasses_replace(cfg: RunConfig, **kw: object) -> RunConfig:
    import dataclasses

    return dataclasses.replace(cfg, **kw)  # type: ignore[arg-type]


def test_bad_workload_and_bad_count_are_clear_errors(tmp_path: Path) -> None:
    cfg = RunConfig(notaries=("http://127.0.0.1:1",), progress_interval=0)
    bad = tmp_path / "not-a-workload.csv"
    bad.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ReplayInputError, match="not a workload file"):
        run_senders(bad, cfg, tmp_path / "r.csv", 2, quiet=True)
    with pytest.raises(ReplayInputError, match="senders must be"):
        run_senders(bad, cfg, tmp_path / "r.csv", 0, quiet=True)
    assert not (tmp_path / "r.csv").exists() and not list(tmp_path.glob("*.part"))


def test_a_malformed_row_in_strict_mode_stops_the_run_with_its_message(tmp_path: Path) -> None:
    """Strict: the malformed row (past the first) stops every sender; the error names it.
    Not strict: it is skipped, reported once (by the first sender), and the run ends."""
    wl = _workload(tmp_path / "w.csv", 20, 0.001)
    with wl.open("a") as fh:
        fh.write("0.05,request,c1,,443,AA,1\n")
    closed = f"http://127.0.0.1:{free_port()}"
    cfg = RunConfig(notaries=(closed,), timeout=1, progress_interval=0, warm_connections=0)
    with pytest.raises(ReplayInputError, match="sender .*empty host"):
        run_senders(wl, cfg, tmp_path / "r.csv", 2, strict=True, quiet=True)
    proc = subprocess.run([str(REPLAY), "run", str(wl), "--notary", closed, "-o",
                           str(tmp_path / "r2.csv"), "--senders", "2", "--quiet",
                           "--warm-connections", "0", "--timeout", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("malformed row skipped") == 1
    assert json.loads(proc.stderr.strip().splitlines()[-1])["errors"] == {"connect": 20}


def test_sigterm_stops_every_sender_and_keeps_what_was_sent(tmp_path: Path) -> None:
    """SIGTERM to ``replay run --senders 2``: both senders stop sending, the rows of what
    was sent are merged into the results, and the summary says it stopped early."""
    wl = _workload(tmp_path / "w.csv", 4000, 0.01)  # 40 s of schedule
    port = free_port()
    server = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parents[2] / "bench"
                                                   / "replay" / "trivial_server.py"),
                               str(port), "--raw"])
    try:
        # the first requests must not race the server's start (they would fail to connect)
        wait_http(f"http://127.0.0.1:{port}/", proc=server)
        out = tmp_path / "r.csv"
        proc = subprocess.Popen([str(REPLAY), "run", str(wl), "--notary",
                                 f"http://127.0.0.1:{port}", "-o", str(out), "--senders", "2",
                                 "--progress-interval", "0.5"],
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        for line in proc.stderr:  # both senders are sending
            if "sender 2/2" in line and "sent" in line or time.monotonic() > deadline:
                break
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGTERM)
        rest = proc.stderr.read()
        proc.stderr.close()
        assert proc.wait(timeout=60) == 0, rest
        summary = json.loads(rest.strip().splitlines()[-1])
        rows = list(read_results(out))
        assert summary["stopped_early"] and 0 < summary["sent"] < 4000
        assert len(rows) == summary["events"] and len({r.seq for r in rows}) == len(rows)
        assert all(r.status == 200 for r in rows), [r for r in rows if r.status != 200][:5]
        assert not list(tmp_path.glob("*.part"))
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_killed_coordinator_takes_its_senders_with_it(tmp_path: Path) -> None:
    """SIGKILL to ``replay run --senders 2`` (nothing can be passed on): both senders get
    SIGTERM from the kernel, stop, and leave their rows in their part files. The twin: while
    the coordinator lives, the senders run on."""
    wl = _workload(tmp_path / "w.csv", 6000, 0.01)  # 60 s of schedule
    closed = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "r.csv"
    proc = subprocess.Popen([str(REPLAY), "run", str(wl), "--notary", closed, "-o", str(out),
                             "--senders", "2", "--quiet", "--warm-connections", "0",
                             "--timeout", "1"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        children: list[int] = []
        while time.monotonic() < deadline and len(children) < 2:
            children = [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]
            time.sleep(0.1)
        assert len(children) == 2
        time.sleep(2.0)
        assert all(_alive(c) for c in children)  # the twin: they run while it lives
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(c) for c in children):
            time.sleep(0.1)
        assert not any(_alive(c) for c in children)
        for k in (0, 1):
            rows = list(read_results(part_path(out, k)))
            assert rows and all(r.seq % 2 == k for r in rows)
        assert not out.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, dead but not yet reaped by init, does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_killed_sender_is_an_error_and_its_part_file_stays(tmp_path: Path) -> None:
    """A sender killed mid-run: the coordinator stops the other one, says which one died and
    where its rows are; the other sender's rows are not thrown away either (its part file
    stays too)."""
    wl = _workload(tmp_path / "w.csv", 3000, 0.01)
    closed = f"http://127.0.0.1:{free_port()}"
    cfg = RunConfig(notaries=(closed,), timeout=1, progress_interval=0, warm_connections=0)
    out = tmp_path / "r.csv"

    def kill_one() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if part_path(out, 1).exists() and part_path(out, 1).stat().st_size > 0:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        pids = subprocess.run(["pgrep", "-f", "replay.senders"], capture_output=True,
                              text=True).stdout.split()
        mine = [int(p) for p in pids if _sender_of(int(p), out)]
        assert mine
        os.kill(mine[-1], signal.SIGKILL)

    import threading

    killer = threading.Thread(target=kill_one)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(ReplayIOError, match=r"sender \d ended .*part"):
        run_senders(wl, dataclasses_replace(cfg, max_duration=20.0), out, 2, quiet=True)
    killer.join()
    # the other sender was told to stop (its schedule had 17 s more to go)
    assert time.monotonic() - t0 < 15
    assert part_path(out, 0).exists() and part_path(out, 1).exists()


def _sender_of(pid: int, out: Path) -> bool:
    """``pid`` is a sender started by this test process."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return False
    return argv[1:3] == [b"-m", b"replay.senders"] and ppid == os.getpid()


def test_a_sender_that_cannot_start_ends_the_run_at_once(tmp_path: Path) -> None:
    """A sender that cannot write its part file fails before the start: the run ends with
    its error, at once, and the senders that were ready (waiting for the start) end too."""
    wl = _workload(tmp_path / "w.csv", 10, 0.01)
    out = tmp_path / "r.csv"
    part_path(out, 1).mkdir()  # sender 1's part file cannot be opened
    cfg = RunConfig(notaries=(f"http://127.0.0.1:{free_port()}",), progress_interval=0,
                    warm_connections=0)
    t0 = time.monotonic()
    with pytest.raises(ReplayIOError, match="sender 1: cannot write"):
        run_senders(wl, cfg, out, 3, quiet=True)
    assert time.monotonic() - t0 < 10
    assert not subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "replay.senders"],
                              capture_output=True).stdout
