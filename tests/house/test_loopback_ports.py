"""Two pytest-xdist workers never hand out the same free port: worker N of W takes only
ports with ``(port // 2) % W == N`` (tests/loopback.py)."""

from __future__ import annotations

import pytest
from loopback import free_port, xdist_share


def _as_worker(monkeypatch: pytest.MonkeyPatch, worker: str | None, count: str | None) -> None:
    for name, value in (("PYTEST_XDIST_WORKER", worker), ("PYTEST_XDIST_WORKER_COUNT", count)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


@pytest.mark.parametrize("worker", [0, 1])
def test_each_worker_hands_out_only_its_share(monkeypatch: pytest.MonkeyPatch,
                                              worker: int) -> None:
    _as_worker(monkeypatch, f"gw{worker}", "2")
    ports = [free_port() for _ in range(20)]
    assert all(p // 2 % 2 == worker for p in ports), ports
    assert len(set(ports)) == len(ports)


def test_twin_the_other_workers_ports_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_worker(monkeypatch, "gw1", "2")
    assert xdist_share(40003) and not xdist_share(40001)
    _as_worker(monkeypatch, "gw0", "2")
    assert xdist_share(40001) and not xdist_share(40003)


def test_outside_xdist_every_port_is_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    _as_worker(monkeypatch, None, None)
    assert xdist_share(40001) and xdist_share(40003)
    _as_worker(monkeypatch, "gw0", "1")  # one worker: no split
    assert xdist_share(40003)
    _as_worker(monkeypatch, "gw3", "2")  # a replacement worker's id wraps around
    assert xdist_share(40003) and not xdist_share(40001)
