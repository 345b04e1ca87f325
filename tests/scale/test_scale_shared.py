"""Two notary processes sharing one real redis-server; the settings that select it.

What one notary learned by probing, another answers from the shared store without probing.
The twin: two notaries on separate stores each have to probe.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_testing import RedisServer
from scale_helpers import TLSTarget, free_port, post_fp, running_notary

from notary.cli import _parser, settings_from_args
from notary.config import load_toml


@pytest.fixture
def tls_target(tmp_path: Path) -> Iterator[TLSTarget]:
    t = TLSTarget(tmp_path)
    try:
        yield t
    finally:
        t.stop()


def probes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("notary_probe_seconds_count"))


@pytest.mark.parametrize("shared", [True, False])
def test_second_notary_answers_from_the_shared_store(
    tmp_path: Path, redis_server: RedisServer, redis_prefix: str, tls_target: TLSTarget,
    shared: bool,
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 site.test\n")
    ma, mb = free_port(), free_port()
    store_b = (["--redis", redis_server.url, "--redis-prefix", redis_prefix] if shared
               else ["--redis", redis_server.url, "--redis-prefix", redis_prefix + "other:"])
    common = ["--hosts-file", str(hosts)]
    with running_notary(tmp_path / "a", [*common, "--redis", redis_server.url,
                                         "--redis-prefix", redis_prefix,
                                         "--metrics-listen", f"127.0.0.1:{ma}"]) as a, \
            running_notary(tmp_path / "b", [*common, *store_b,
                                            "--metrics-listen", f"127.0.0.1:{mb}"]) as b:
        status, headers, _ = post_fp(a.url, "site.test", tls_target.port, tls_target.sha1)
        assert status == 200 and headers["Cache-Status"] == "converge-notary; fwd=miss"
        status, headers, _ = post_fp(b.url, "site.test", tls_target.port, tls_target.sha1)
        assert status == 200
        assert probes(ma) == 1
        if shared:
            assert headers["Cache-Status"] == "converge-notary; hit"
            assert probes(mb) == 0
        else:
            assert headers["Cache-Status"] == "converge-notary; fwd=miss"
            assert probes(mb) == 1


def test_redis_and_limits_from_flags_and_from_toml(tmp_path: Path) -> None:
    args = _parser().parse_args(["serve", "--redis", "redis://10.0.0.1:6379/2",
                                 "--metrics-listen", "127.0.0.1:9100", "--rate-limit", "5",
                                 "--rate-burst", "9", "--max-connections", "77"])
    s = settings_from_args(args)
    assert (s.redis, s.metrics_listen, s.rate_limit, s.rate_burst, s.max_connections) == (
        "redis://10.0.0.1:6379/2", "127.0.0.1:9100", 5.0, 9, 77)
    cfg = tmp_path / "n.toml"
    cfg.write_text('[notary]\nredis = "redis://r:6379/0"\nredis-prefix = "x:"\n'
                   'metrics_listen = "127.0.0.1:9200"\nrate_limit = 3\n')
    values = load_toml(cfg)
    assert values == {"redis": "redis://r:6379/0", "redis_prefix": "x:",
                      "metrics_listen": "127.0.0.1:9200", "rate_limit": 3.0}
    s = settings_from_args(_parser().parse_args(["serve", "--config", str(cfg)]))
    assert s.redis == "redis://r:6379/0" and s.redis_prefix == "x:"
    defaults = settings_from_args(_parser().parse_args(["serve"]))
    assert defaults.redis is None and defaults.metrics_listen is None  # off unless asked


def test_workers_metrics_are_served_together_on_one_port(
    tmp_path: Path, tls_target: TLSTarget
) -> None:
    """One scrape target per instance: every worker's samples, labelled worker="i"."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 site.test\n")
    mport = free_port()
    args = ["--hosts-file", str(hosts), "--workers", "2", "--metrics-listen",
            f"127.0.0.1:{mport}"]
    with running_notary(tmp_path / "n", args) as n:
        for _ in range(20):
            assert post_fp(n.url, "site.test", tls_target.port, tls_target.sha1)[0] == 200
        deadline = time.monotonic() + 15
        while True:  # the second worker may still be starting
            text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5
                                          ).read().decode()
            if 'worker="1"' in text and "notary_metrics_workers_unreachable 0" in text:
                break
            assert time.monotonic() < deadline, text[-500:]
            time.sleep(0.2)
        assert urllib.request.urlopen(f"http://127.0.0.1:{mport}/readyz", timeout=5
                                      ).status == 200
        health = urllib.request.urlopen(f"http://127.0.0.1:{mport}/healthz", timeout=5
                                        ).read().decode()
        assert "2 workers" in health
    counts = [line for line in text.splitlines() if line.startswith("notary_requests_total{")]
    assert {'worker="0"' in c for c in counts} == {True, False}  # both workers present
    assert text.count("# TYPE notary_requests_total counter") == 1  # one family, once
    total = sum(float(line.split()[1]) for line in counts)
    assert total == 20  # the workers' counters add up to every request, none counted twice
