"""Slow name lookups from one client must not stop other clients' lookups.

A ``notary serve`` process runs in a private mount namespace whose ``/etc/resolv.conf`` names
a nameserver on 127.0.0.99 that never answers (a UDP socket this test holds open and never
reads) and whose ``/etc/hosts`` maps the victims' names to 127.0.0.1, so the system resolver
really blocks for names it has to ask DNS about (glibc: 5 s x 2 attempts) and answers the
hosts file at once. One client (127.0.0.1) asks about 8 names in a zone that never answers;
another (127.0.0.2) then asks about a site in the hosts file. Through the event loop's shared
pool of 4 threads the victim's lookup waited behind the attacker's, timed out and was
remembered as unreachable for a minute; with the lookups bounded per client it is answered.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trustme
from security_support import (
    NotaryProcess,
    Results,
    ThreadServer,
    copy_identity,
    leaf_der,
    sha1_colon,
)

SUITE = "hostile clients"
SILENT_DNS = "127.0.0.99"
PROBE_TIMEOUT = 2.0
ATTACK_NAMES = 8


def _can_unshare() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, timeout=10)
    return None if r.returncode == 0 else f"unshare -m failed: {r.stderr.strip()}"


@pytest.fixture
def silent_dns() -> Iterator[None]:
    """A nameserver that receives every query and answers none."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((SILENT_DNS, 53))
    except OSError as exc:
        s.close()
        pytest.skip(f"cannot bind {SILENT_DNS}:53: {exc}")
    try:
        yield
    finally:
        s.close()


def _namespaced_notary(tmp: Path, identity_dir: Path, extra: list[str]) -> NotaryProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    resolv, hosts = tmp / "resolv.conf", tmp / "hosts"
    resolv.write_text(f"nameserver {SILENT_DNS}\n")
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 victim.test\n")
    prefix = ["unshare", "-m", "sh", "-c",
              f'mount --bind "{resolv}" /etc/resolv.conf && mount --bind "{hosts}" /etc/hosts '
              '&& exec "$@"', "sh"]
    return NotaryProcess(copy_identity(identity_dir, tmp / "d"), [
        "--allow-target", "127.0.0.0/8", "--probe-timeout", str(PROBE_TIMEOUT), "--no-log",
        *extra], prefix=prefix)


def _attack_then_victim(n: NotaryProcess, target: ThreadServer, cert: trustme.LeafCert
                        ) -> tuple[list[int], int, float, str]:
    with ThreadPoolExecutor(ATTACK_NAMES) as pool:
        attack = [pool.submit(n.query, f"y{i}.slow.test+443", None, source="127.0.0.1")
                  for i in range(ATTACK_NAMES)]
        time.sleep(0.5)  # the attacker's lookups are stuck in the system resolver
        victim = n.query(f"victim.test+{target.port}", sha1_colon(leaf_der(cert)),
                         source="127.0.0.2")
        statuses = [f.result().status for f in attack]
    return statuses, victim.status, victim.seconds, victim.headers.get("cache-status", "")


def test_stuck_lookups_of_one_client_leave_others_resolving(
        tmp_path: Path, identity_dir: Path, good_target: ThreadServer,
        site_cert: trustme.LeafCert, silent_dns: None, results: Results) -> None:
    why = _can_unshare()
    if why is not None:
        pytest.skip(why)
    n = _namespaced_notary(tmp_path / "a", identity_dir, [])
    try:
        statuses, victim, seconds, cache = _attack_then_victim(n, good_target, site_cert)
        assert n.alive()
    finally:
        n.stop()
    row = results.add(SUITE, f"{ATTACK_NAMES} names whose nameserver never answers, from one "
                      "address, then another client's name", "the other client answered 200",
                      f"attacker {sorted(set(statuses))} x {ATTACK_NAMES}; other client "
                      f"{victim} ({cache})", seconds)
    row.passed = False
    assert victim == 200, cache
    assert all(s == 503 for s in statuses)
    row.passed = True


def test_twin_with_the_shares_off_the_stuck_lookups_take_every_thread(
        tmp_path: Path, identity_dir: Path, good_target: ThreadServer,
        site_cert: trustme.LeafCert, silent_dns: None) -> None:
    """Without per-client shares (and 4 lookup threads, as the loop's own pool had) the
    attacker's lookups hold every thread: the other client gets a fast 503 saying so, not
    an answer about its target, and it is not remembered as unreachable."""
    why = _can_unshare()
    if why is not None:
        pytest.skip(why)
    n = _namespaced_notary(tmp_path / "b", identity_dir, [
        "--client-share", "0", "--group-share", "0", "--resolver-threads", "4"])
    try:
        _, victim, seconds, cache = _attack_then_victim(n, good_target, site_cert)
    finally:
        n.stop()
    assert victim == 503 and seconds < PROBE_TIMEOUT and "hit" not in cache
