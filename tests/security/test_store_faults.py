"""Store failures an operator sees, once; clients see a neutral text (issue 33).

Real processes: a notary on a real redis-server that is killed and started again, and a
notary on SQLite whose file size limit (RLIMIT_FSIZE, set with ``prlimit``: no root, no
mount) makes the disk "full" and is then lifted. In both, 300 requests that need the store
get 503 with a text naming nothing internal, the notary's log gets one WARNING line for the
outage and one when the store works again; the twins (the same requests, nothing failing)
are answered 200 and log no store line.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from redis_testing import RedisServer
from security_support import (
    NotaryProcess,
    Results,
    ThreadServer,
    copy_identity,
    leaf_der,
    query,
    server_ctx,
    sha1_colon,
    tls_handler,
)

SUITE = "store faults"
REQUESTS = 300
NEUTRAL = b"the notary's store is unavailable; retry shortly\n"
PRLIMIT = shutil.which("prlimit")


def store_lines(n: NotaryProcess, at_least: int = 0, seconds: float = 10.0) -> list[str]:
    """The notary's store lines so far, once there are ``at_least`` of them (or after
    ``seconds``): the notary writes a line before it answers, but the thread that reads its
    stderr may not have read the line yet when the answer arrives."""
    deadline = time.monotonic() + seconds
    while True:
        lines = [line for line in list(n.lines) if " notary.store store " in line]
        if len(lines) >= at_least or time.monotonic() >= deadline:
            return lines
        time.sleep(0.05)


def ask_many(n: NotaryProcess, port: int, fp: str, tag: str) -> list[tuple[int, bytes]]:
    """``REQUESTS`` requests about distinct client-named targets (each needs the store)."""
    return [(r.status, r.body) for r in (
        query(n.port, f"{tag}{i}.test+{port}/127.0.0.1", fp, tls=False)
        for i in range(REQUESTS))]


def until_ok(ask: Callable[[], int], seconds: float = 15.0) -> int:
    deadline = time.monotonic() + seconds
    status = ask()
    while status != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
        status = ask()
    return status


def check_outage(n: NotaryProcess, replies: list[tuple[int, bytes]]) -> None:
    assert all(status == 503 for status, _ in replies), {s for s, _ in replies}
    assert all(body == NEUTRAL for _, body in replies), {b for _, b in replies}
    lines = store_lines(n, at_least=1)
    assert len(lines) == 1 and " failing: " in lines[0], lines


@pytest.mark.timeout(180)
@pytest.mark.parametrize("outage", [True, False])
def test_dead_redis_logged_once_and_recovery(
    identity_dir: Path, tmp_path: Path, site_cert: trustme.LeafCert, results: Results,
    outage: bool,
) -> None:
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    target = ThreadServer(tls_handler(server_ctx(site_cert)))
    fp = sha1_colon(leaf_der(site_cert))
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), [
        "--allow-target", "127.0.0.0/8", "--redis", redis.url, "--no-log"], tls=False)
    try:
        assert query(n.port, f"first.test+{target.port}/127.0.0.1", fp, tls=False).status == 200
        if outage:
            redis.stop()
        t0 = time.monotonic()
        replies = ask_many(n, target.port, fp, "r")
        secs = time.monotonic() - t0
        if not outage:
            assert all(status == 200 for status, _ in replies)
            assert store_lines(n) == []
            results.add(SUITE, f"twin: Redis up, {REQUESTS} requests needing the store",
                        "all 200, no store line in the log", "all 200, 0 store lines", secs)
            return
        check_outage(n, replies)
        redis.start()  # same port, empty
        status = until_ok(lambda: query(n.port, f"back.test+{target.port}/127.0.0.1", fp,
                                        tls=False).status)
        assert status == 200
        lines = store_lines(n, at_least=2)
        assert len(lines) == 2 and f"recovered after {REQUESTS}" in lines[1], lines
        results.add(SUITE, f"redis-server killed; {REQUESTS} requests needing the store; "
                    "Redis started again",
                    "503 with a neutral text; one WARNING line, then one recovery line",
                    f"{REQUESTS} x 503 neutral; log: 1 failure line, 1 recovery line", secs)
    finally:
        n.stop()
        redis.stop()
        target.close()


@pytest.mark.skipif(PRLIMIT is None, reason="prlimit (util-linux) is not installed")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("full", [True, False])
def test_full_disk_logged_once_and_recovery(
    identity_dir: Path, tmp_path: Path, site_cert: trustme.LeafCert, results: Results,
    full: bool,
) -> None:
    assert PRLIMIT is not None
    target = ThreadServer(tls_handler(server_ctx(site_cert)))
    fp = sha1_colon(leaf_der(site_cert))
    data = copy_identity(identity_dir, tmp_path / "data")
    limit = 256 * 1024 if full else 1 << 40  # bytes any file of the notary may reach
    n = NotaryProcess(data, ["--allow-target", "127.0.0.0/8", "--no-log"], tls=False,
                      prefix=[PRLIMIT, f"--fsize={limit}:unlimited"])
    try:
        # fill the file up to the limit (the WAL grows by pages per commit)
        t0 = time.monotonic()
        replies = ask_many(n, target.port, fp, "fill")
        filled = [i for i, (status, _) in enumerate(replies) if status == 503]
        if not full:
            assert filled == [] and store_lines(n) == []
            results.add(SUITE, f"twin: no file size limit, {REQUESTS} new records",
                        "all 200, no store line in the log", "all 200, 0 store lines",
                        time.monotonic() - t0)
            return
        assert filled and filled == list(range(filled[0], REQUESTS)), filled[:5]
        check_outage(n, replies[filled[0]:])
        # the operator frees room: the limit of the running process is lifted
        subprocess.run([PRLIMIT, "--pid", str(n.pid), "--fsize=unlimited:unlimited"], check=True,
                       timeout=10)
        status = until_ok(lambda: query(n.port, f"back.test+{target.port}/127.0.0.1", fp,
                                        tls=False).status)
        assert status == 200
        lines = store_lines(n, at_least=2)
        assert len(lines) == 2 and "recovered after" in lines[1], lines
        results.add(SUITE, f"SQLite file over its size limit (RLIMIT_FSIZE {limit} bytes) "
                    f"during {REQUESTS} new records; limit lifted",
                    "503 with a neutral text; one WARNING line, then one recovery line",
                    f"{REQUESTS - filled[0]} x 503 neutral after {filled[0]} stored; log: 1 "
                    "failure line, 1 recovery line", time.monotonic() - t0)
    finally:
        n.stop()
        target.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("budget", [True, False])
def test_flood_of_names_stays_under_the_store_cap(
    identity_dir: Path, tmp_path: Path, site_cert: trustme.LeafCert, results: Results,
    budget: bool,
) -> None:
    """One address asks about 1,000 distinct names (a hosts file maps them all to one real
    TLS site): with ``--store-max-records 200`` the store keeps at most 200 records and the
    honest target asked before (twice) keeps its history; the twin without a cap keeps all."""
    flood, cap = 1000, 200
    target = ThreadServer(tls_handler(server_ctx(site_cert)))
    fp = sha1_colon(leaf_der(site_cert))
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 bank.test " + " ".join(f"f{i}.test" for i in range(flood))
                     + "\n", encoding="ascii")
    data = copy_identity(identity_dir, tmp_path / "data")
    args = ["--allow-target", "127.0.0.0/8", "--no-log", "--hosts-file", str(hosts),
            "--store-max-records", str(cap if budget else 0)]
    n = NotaryProcess(data, args, tls=False)
    try:
        assert query(n.port, f"bank.test+{target.port}", fp, tls=False).status == 200
        assert query(n.port, f"bank.test+{target.port}", fp, tls=False).status == 200  # hit
        time.sleep(1.1)  # the hit is written as a use within a second
        t0 = time.monotonic()
        statuses = [query(n.port, f"f{i}.test+{target.port}", fp, tls=False).status
                    for i in range(flood)]
        secs = time.monotonic() - t0
        assert statuses == [200] * flood
    finally:
        n.stop()
        target.close()
    with sqlite3.connect(data / "notary.sqlite3") as db:
        records = db.execute("SELECT count(*) FROM targets").fetchone()[0]
        bank = db.execute("SELECT count(*) FROM observations WHERE location = ?",
                          (f"bank.test:{target.port}",)).fetchone()[0]
    size = (data / "notary.sqlite3").stat().st_size
    if budget:
        assert records <= cap and bank == 1, (records, bank)
        results.add(SUITE, f"one address asks about {flood} distinct names after an honest "
                    f"site (--store-max-records {cap})",
                    f"at most {cap} records kept; the honest site's history kept",
                    f"{records} records ({size // 1024} KiB file); honest history kept", secs)
    else:
        assert records == flood + 1, records
        results.add(SUITE, f"twin: the same {flood} names without a store cap",
                    "every record kept (over the cap)", f"{records} records "
                    f"({size // 1024} KiB file)", secs)
