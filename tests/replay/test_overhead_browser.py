"""replay overhead's browser subset: a real headless Firefox loads the synthetic page through
toxiproxy over http and https. Over a 100 ms path its https load (fresh connections, TLS 1.3
full handshakes) is at least 2 RTT slower than its http load; over a 0 ms path the
difference is below that. Each compares the fastest of three loads of each scheme: on this
shared machine a single load's time has up to hundreds of ms of CPU queueing in it (at load
average 14, 81-609 ms for the same http load over the 0 ms path). The persistent load
reuses the warm pool (no new TLS connection for the page), the non-persistent one does not.
Skipped only when Firefox is not installed (scripts/install-system-deps installs
firefox-esr)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replay.errors import ReplayInputError
from replay.overhead.browser import (
    find_firefox,
    model_round_trips,
    render_browser_section,
    run_browser_subset,
)
from replay.overhead.pages import PageShape, make_page
from replay.overhead.profiles import PathProfile

RTT = 100
SLOW = PathProfile("test-100", RTT, 0, 0, 0, "test: 100 ms, no bandwidth limit")
ZERO = PathProfile("test-0", 0, 0, 0, 0, "test: no toxics")
# one redirect hop, the HTML and an object on the page's host and one on another host:
# three TLS handshakes in a row, few beside them (each costs CPU time on a busy machine,
# which the 0 ms path's difference is made of)
PAGE = make_page(PageShape(objects=2, hosts=1, html_bytes=3_000, median_bytes=2_000,
                           sigma=0.3, cap_bytes=8_000, redirects=1), 1)
ROUNDS = 3


def _firefox() -> str:
    exe = find_firefox()
    if exe is None:
        pytest.skip("Firefox is not installed (firefox-esr: scripts/install-system-deps)")
    return exe


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _firefox()
    res = run_browser_subset(tmp_path_factory.mktemp("browser"), (SLOW, ZERO),
                             rounds=ROUNDS, page=PAGE)
    print(render_browser_section(res))  # shown with -s or on a failure
    return res


@pytest.mark.slow
def test_https_costs_handshakes_over_a_100ms_path(result: dict[str, Any]) -> None:
    f = result["results"]["test-100"]["non-persistent"]["firefox"]
    assert f["n"] == ROUNDS
    # TLS 1.3 full handshakes: the redirect hop's, the page's, the other host's (3 RTT)
    assert model_round_trips(PAGE, "non-persistent") == 3
    assert f["fastest_ms"] >= 2 * RTT, f
    assert f["tls_versions"] == ["TLS 1.3"]
    assert f["https_new_tls_connection_share"] == 1.0
    assert f["resources"]["https"]["objects_per_load"] == len(PAGE.objects)


@pytest.mark.slow
def test_https_costs_little_over_a_0ms_path(result: dict[str, Any]) -> None:
    f = result["results"]["test-0"]["non-persistent"]["firefox"]
    assert f["n"] == ROUNDS
    assert f["fastest_ms"] < 2 * RTT, f


@pytest.mark.slow
def test_persistent_loads_reuse_the_warm_pool(result: dict[str, Any]) -> None:
    warm = result["results"]["test-100"]["persistent"]["firefox"]
    cold = result["results"]["test-100"]["non-persistent"]["firefox"]
    assert warm["https_new_tls_connection_share"] == 0.0
    assert cold["https_new_tls_connection_share"] == 1.0
    assert warm["fastest_ms"] < cold["fastest_ms"] - RTT, (warm, cold)


@pytest.mark.slow
def test_python_client_in_the_same_rounds(result: dict[str, Any]) -> None:
    for prof in ("test-100", "test-0"):
        for mode in ("non-persistent", "persistent"):
            p = result["results"][prof][mode]["python"]
            assert p["n"] == ROUNDS and len(p["https_s"]) == ROUNDS
    # the Python client's TLS 1.3 handshakes (3 RTT by the model) cost their round trips
    assert result["results"]["test-100"]["non-persistent"]["python"]["fastest_ms"] >= 2 * RTT


@pytest.mark.slow
def test_section_marks_every_row(result: dict[str, Any]) -> None:
    md = render_browser_section(result)
    rows = [ln for ln in md.splitlines() if ln.startswith("| test-")]
    assert len(rows) == 2 * 2 * 2  # profiles x modes x (Firefox, Python)
    assert all("| measured |" in r for r in rows)
    assert "loadEventEnd" in md


def test_bad_input_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ReplayInputError, match="modes"):
        run_browser_subset(tmp_path, (ZERO,), modes=("sometimes",))
    with pytest.raises(ReplayInputError, match="rounds"):
        run_browser_subset(tmp_path, (ZERO,), rounds=0)
    monkeypatch.setenv("REPLAY_FIREFOX", str(tmp_path / "no-firefox"))
    with pytest.raises(ReplayInputError, match="not an executable"):
        run_browser_subset(tmp_path, (ZERO,))
