"""Faults with real processes: Redis stopped and restarted under load; SIGKILL during writes.

* Redis down: the notary keeps answering what its in-process cache holds, answers 503 with
  ``Retry-After`` and a message naming the store where it cannot, never drops a connection or
  dies, reports not-ready, and recovers by itself when Redis is back on the same address.
* SQLite: a notary killed with SIGKILL while writing loses no record it had confirmed to a
  client (a 200 after a live probe is sent only after the commit).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_testing import RedisServer
from scale_helpers import TLSTarget, free_port, post_fp, running_notary


@pytest.fixture
def tls_target(tmp_path: Path) -> Iterator[TLSTarget]:
    t = TLSTarget(tmp_path)
    try:
        yield t
    finally:
        t.stop()


def hosts_file(path: Path, n: int) -> Path:
    path.write_text("127.0.0.1 " + " ".join(f"h{i}.test" for i in range(n)) + "\n")
    return path


def http_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class Load:
    """Background request loops (bounded by time and count) recording every outcome."""

    def __init__(self, url: str, hosts: list[str], port: int, fp: str, threads: int = 3) -> None:
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(url, hosts[i::threads], port, fp))
            for i in range(threads)
        ]
        for t in self._threads:
            t.start()

    def _run(self, url: str, hosts: list[str], port: int, fp: str) -> None:
        deadline = time.monotonic() + 30
        for n in range(5000):
            if self._stop.is_set() or time.monotonic() > deadline:
                return
            try:
                status, _, _ = post_fp(url, hosts[n % len(hosts)], port, fp, timeout=5)
                self.statuses.append(status)
            except OSError as exc:
                self.errors.append(repr(exc))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def test_redis_outage_under_load_serves_cache_503s_the_rest_and_recovers(
    tmp_path: Path, own_redis: RedisServer, tls_target: TLSTarget
) -> None:
    port, fp = tls_target.port, tls_target.sha1
    mport = free_port()
    args = ["--redis", own_redis.url, "--hosts-file", str(hosts_file(tmp_path / "hosts", 400)),
            "--metrics-listen", f"127.0.0.1:{mport}", "--negative-ttl", "0"]
    with running_notary(tmp_path / "n", args) as n:
        for i in range(10):
            assert post_fp(n.url, f"h{i}.test", port, fp)[0] == 200
        assert http_status(f"http://127.0.0.1:{mport}/readyz")[0] == 200
        # the load mixes cached names with many never-seen ones
        mix = [f"h{i}.test" for i in [*range(10), *range(100, 400)]]
        load = Load(n.url, mix, port, fp)
        try:
            time.sleep(0.1)
            own_redis.stop()
            time.sleep(1.0)
            status, headers, _ = post_fp(n.url, "h3.test", port, fp)
            assert status == 200 and headers["Cache-Status"] == "converge-notary; hit"
            status, headers, body = post_fp(n.url, "h40.test", port, fp)
            assert status == 503
            assert headers["Retry-After"] == "1"
            assert "store-unavailable" in headers["Cache-Status"]
            assert body == b"the notary's store is unavailable; retry shortly\n"
            ready, text = http_status(f"http://127.0.0.1:{mport}/readyz")
            assert ready == 503 and "Redis" in text
            assert http_status(f"http://127.0.0.1:{mport}/healthz")[0] == 200
            own_redis.start()  # same port, empty (no persistence)
            deadline = time.monotonic() + 15
            status = 0
            while time.monotonic() < deadline:
                status = post_fp(n.url, "h41.test", port, fp)[0]
                if status == 200:
                    break
                time.sleep(0.2)
            assert status == 200, "the notary did not recover after Redis came back"
            assert http_status(f"http://127.0.0.1:{mport}/readyz")[0] == 200
        finally:
            load.stop()
        assert n.proc is not None and n.proc.poll() is None, "the notary died"
        assert load.errors == []  # no dropped connections
        assert set(load.statuses) <= {200, 503}
        assert 200 in load.statuses and 503 in load.statuses
        _, metrics = http_status(f"http://127.0.0.1:{mport}/metrics")
        assert "notary_store_errors_total" in metrics
        errors = [line for line in metrics.splitlines()
                  if line.startswith("notary_store_errors_total ")]
        assert float(errors[0].split()[1]) > 0


def test_sqlite_sigkill_during_writes_loses_no_committed_record(
    tmp_path: Path, tls_target: TLSTarget
) -> None:
    port, fp = tls_target.port, tls_target.sha1
    names = [f"h{i}.test" for i in range(400)]
    args = ["--hosts-file", str(hosts_file(tmp_path / "hosts", len(names)))]
    confirmed: list[str] = []
    lock = threading.Lock()
    with running_notary(tmp_path / "n", args) as n:
        assert n.proc is not None

        def writer(mine: list[str]) -> None:
            for host in mine:
                try:
                    status, headers, _ = post_fp(n.url, host, port, fp, timeout=5)
                except OSError:
                    return  # the notary is gone
                if status == 200 and headers.get("Cache-Status") == "converge-notary; fwd=miss":
                    with lock:
                        confirmed.append(host)

        threads = [threading.Thread(target=writer, args=(names[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(confirmed) < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(n.proc.pid, signal.SIGKILL)  # mid-write: eight writers are in flight
        n.proc.wait(10)
        for t in threads:
            t.join(15)
    assert len(confirmed) >= 60
    db = sqlite3.connect(tmp_path / "n" / "notary.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = {row[0] for row in db.execute("SELECT location FROM targets")}
        observed = {row[0] for row in db.execute("SELECT DISTINCT location FROM observations")}
    finally:
        db.close()
    want = {f"{h}:{port}" for h in confirmed}
    assert want <= stored and want <= observed
    assert len(stored) < len(names)  # the kill really interrupted the run


def test_redis_paused_answers_503_within_the_timeout_and_keeps_history(
    tmp_path: Path, own_redis: RedisServer, tls_target: TLSTarget
) -> None:
    """A Redis that hangs (SIGSTOP) instead of refusing: every wait is bounded, and the
    history written before the pause is intact and extended correctly after it."""
    port, fp = tls_target.port, tls_target.sha1
    args = ["--redis", own_redis.url, "--hosts-file", str(hosts_file(tmp_path / "hosts", 5)),
            "--negative-ttl", "0", "--recheck-after", "0"]
    with running_notary(tmp_path / "n", args) as n:
        assert post_fp(n.url, "h0.test", port, fp)[0] == 200
        assert own_redis.proc is not None
        own_redis.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            status, headers, body = post_fp(n.url, "h1.test", port, fp, timeout=15)
            took = time.monotonic() - started
        finally:
            own_redis.proc.send_signal(signal.SIGCONT)
        assert status == 503 and b"store is unavailable" in body
        assert headers["Retry-After"] == "1"
        assert took < 5, f"a hung store held the request for {took:.1f} s"
        time.sleep(1.1)  # --recheck-after 0: the next request re-probes h0 and extends it
        deadline = time.monotonic() + 10
        while (status := post_fp(n.url, "h0.test", port, fp)[0]) != 200:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
    import redis as redis_sync

    from notary.store.redis import decode_history

    raw = redis_sync.Redis.from_url(own_redis.url)
    try:
        fields = raw.hmget(f"converge:rec:h0.test:{port}", ["v", "h"])
    finally:
        raw.close()
    assert fields[0] is not None and int(fields[0]) >= 2
    history = decode_history(bytes(fields[1]))
    assert len(history) == 1 and history[0].last_seen > history[0].first_seen


def _children(pid: int) -> list[int]:
    """The notary's live worker processes (not multiprocessing's resource tracker)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, timeout=5)
    workers = []
    for child in (int(x) for x in out.stdout.split()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"spawn_main" in cmdline and state != "Z":
            workers.append(child)
    return workers


def _listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f[9])
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def test_sqlite_worker_sigkilled_mid_write_loses_nothing_and_is_replaced(
    tmp_path: Path, tls_target: TLSTarget
) -> None:
    port, fp = tls_target.port, tls_target.sha1
    names = [f"h{i}.test" for i in range(300)]
    args = ["--hosts-file", str(hosts_file(tmp_path / "hosts", len(names))), "--workers", "2"]
    confirmed: list[str] = []
    failed: list[str] = []
    lock = threading.Lock()
    with running_notary(tmp_path / "n", args) as n:
        assert n.proc is not None
        deadline = time.monotonic() + 20
        while len(_children(n.proc.pid)) < 2:
            assert time.monotonic() < deadline, "two workers did not start"
            time.sleep(0.1)
        workers = _children(n.proc.pid)
        # the notary answers once one worker listens: the other may still be starting, and
        # killing the only one listening would leave nobody to serve until it is replaced
        while not all(_listening(w, n.port) for w in workers):
            assert time.monotonic() < deadline, "the two workers did not both listen"
            time.sleep(0.1)
        assert not _listening(n.proc.pid, n.port)  # twin: the supervisor itself does not

        def writer(mine: list[str]) -> None:
            for host in mine:
                try:
                    status, headers, _ = post_fp(n.url, host, port, fp, timeout=5)
                except OSError:
                    with lock:
                        failed.append(host)  # in flight on the killed worker
                    continue
                if status == 200 and headers.get("Cache-Status") == "converge-notary; fwd=miss":
                    with lock:
                        confirmed.append(host)

        threads = [threading.Thread(target=writer, args=(names[i::6],)) for i in range(6)]
        for t in threads:
            t.start()
        while len(confirmed) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(workers[0], signal.SIGKILL)
        for t in threads:
            t.join(60)
        assert len(confirmed) > 40 + len(failed)  # the surviving worker kept serving
        deadline = time.monotonic() + 20
        while workers[0] in _children(n.proc.pid) or len(_children(n.proc.pid)) < 2:
            assert time.monotonic() < deadline, "the supervisor did not replace the worker"
            time.sleep(0.1)
        assert post_fp(n.url, names[0], port, fp)[0] == 200
    db = sqlite3.connect(tmp_path / "n" / "notary.sqlite3")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = {row[0] for row in db.execute("SELECT location FROM targets")}
    finally:
        db.close()
    assert {f"{h}:{port}" for h in confirmed} <= stored
