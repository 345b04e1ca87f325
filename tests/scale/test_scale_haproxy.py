"""deploy/haproxy.cfg run for real on loopback in front of two notaries sharing one Redis.

The shipped configuration is used as it is, except for addresses: the notaries' ``farm:PORT``
and the listeners' ``:PORT`` become free loopback ports. Checks: the configuration is valid
(``haproxy -c``); requests through the balancer reach both notaries, and only one of them
ever probes the target (the other answers from Redis); when one notary dies, every request
still succeeds through the other.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_testing import RedisServer, wait_port
from scale_helpers import ROOT, NotaryProcess, TLSTarget, free_port, post_fp

HAPROXY = shutil.which("haproxy")
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed")
SHIPPED = ROOT / "deploy" / "haproxy.cfg"


def test_shipped_config_is_valid() -> None:
    assert HAPROXY is not None
    r = subprocess.run([HAPROXY, "-c", "-f", str(SHIPPED)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr


def test_a_broken_config_is_refused(tmp_path: Path) -> None:
    assert HAPROXY is not None
    bad = tmp_path / "bad.cfg"
    bad.write_text(SHIPPED.read_text().replace("balance leastconn", "balance fastest"))
    r = subprocess.run([HAPROXY, "-c", "-f", str(bad)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0


LB_SOURCE = "127.0.0.9"  # haproxy's address towards the notaries, their --trusted-proxy


def loopback_config(ports: dict[str, tuple[int, int]], lb: int, stats: int) -> str:
    """The shipped config with loopback addresses: ``ports[name] = (port, metrics port)``."""
    text = SHIPPED.read_text()
    for name, (port, mport) in ports.items():
        text, n = re.subn(rf"server {name} \S+ check port \d+",
                          f"server {name} 127.0.0.1:{port} source {LB_SOURCE} check port {mport}",
                          text)
        assert n == 1, name
    text = text.replace("bind :8443", f"bind 127.0.0.1:{lb}")
    text = text.replace("bind :8404", f"bind 127.0.0.1:{stats}")
    text = text.replace("    maxconn 20000", "    maxconn 2000")  # this machine's FD limit
    return text.replace("inter 2s fall 3 rise 2", "inter 200ms fall 2 rise 1")


@pytest.fixture
def tls_target(tmp_path: Path) -> Iterator[TLSTarget]:
    t = TLSTarget(tmp_path)
    try:
        yield t
    finally:
        t.stop()


def metric_sum(mport: int, prefix: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(float(ln.split()[1]) for ln in lines if ln.startswith(prefix))


def test_two_notaries_behind_haproxy_share_redis_and_survive_one_dying(
    tmp_path: Path, redis_server: RedisServer, redis_prefix: str, tls_target: TLSTarget
) -> None:
    assert HAPROXY is not None
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 site.test\n")
    names = ("notary1", "notary2")
    ports = {n: (free_port(), free_port()) for n in names}
    notaries: dict[str, NotaryProcess] = {}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for n in names:
            port, mport = ports[n]
            if notaries:  # the pool shares one key and certificate, as in docker-compose.yml
                first = next(iter(notaries.values())).data_dir
                (tmp_path / n).mkdir()
                for f in ("notary.key", "notary.pem", "signing.key"):
                    if (first / f).exists():
                        shutil.copy2(first / f, tmp_path / n / f)
            notaries[n] = NotaryProcess(tmp_path / n, port, [
                "--hosts-file", str(hosts), "--redis", redis_server.url,
                "--redis-prefix", redis_prefix, "--metrics-listen", f"127.0.0.1:{mport}",
                "--trusted-proxy", f"{LB_SOURCE}/32"])  # the shipped config sends PROXY v2
            notaries[n].start()
        lb, stats = free_port(), free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(loopback_config(ports, lb, stats))
        with (tmp_path / "haproxy.log").open("wb") as log:
            procs.append(subprocess.Popen([HAPROXY, "-db", "-f", str(cfg)], stdout=log,
                                          stderr=subprocess.STDOUT))
        wait_port(lb)
        url = f"http://127.0.0.1:{lb}"
        time.sleep(0.6)  # a few health-check rounds
        statuses = [post_fp(url, "site.test", tls_target.port, tls_target.sha1)[0]
                    for _ in range(30)]
        assert statuses == [200] * 30
        served = {n: metric_sum(ports[n][1], "notary_requests_total{") for n in names}
        assert all(v > 0 for v in served.values()), served  # both notaries took requests
        assert sum(served.values()) == 30
        probes = sum(metric_sum(ports[n][1], "notary_probe_seconds_count") for n in names)
        assert probes == 1  # the other notary answered from the shared store
        pin = {n: notaries[n].info()["pin_sha1"] for n in names}
        assert len(set(pin.values())) == 1

        notaries["notary2"].stop()  # one notary dies
        statuses = [post_fp(url, "site.test", tls_target.port, tls_target.sha1)[0]
                    for _ in range(20)]
        assert statuses == [200] * 20
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        for n in notaries.values():
            n.stop()
