"""The notary benchmark harness works: each building block for about a second, tiny settings.

No timing assertions: only that the harness measures, counts and reports what it should.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import run_all
from bench.notary import report, stime, wrk
from bench.notary.certs import make_rsa_cert
from bench.notary.floor import library_handshake_cpu_us
from bench.notary.procs import BenchError, Processes, free_port, http_request
from bench.notary.run import Options, run, trivial_argv, unexpected

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="openssl is not installed")

SAMPLE = (
    'Running 1s test\nBENCHJSON {"requests":10,"duration_us":1000000,"bytes":100,'
    '"latency_us":{"mean":1500,"p50":1000,"p90":2000,"p99":3000,"max":4000},'
    '"errors":{"connect":0,"read":1,"write":0,"status":2,"timeout":0},'
    '"statuses":{"200":8,"409":2},"cache_status":{"converge-notary; hit":8,"none":2}}\n'
)


def test_parse_wrk_output() -> None:
    r = wrk.parse_output(SAMPLE, connections=4, threads=2)
    assert (r.requests, r.rate, r.p50_ms, r.p99_ms) == (10, 10.0, 1.0, 3.0)
    assert r.socket_errors == 1
    assert unexpected(r, "200", "converge-notary; hit") == 2
    assert unexpected(r, "409", "converge-notary; fwd=miss") == 10


def test_parse_wrk_output_without_result_line_fails() -> None:
    with pytest.raises(BenchError):
        wrk.parse_output("Running 1s test\n  0 requests\n")


def test_script_refuses_values_that_would_break_lua(tmp_path: Path) -> None:
    ok = wrk.write_script(tmp_path / "ok.lua", target_host="site.test", target_port=443,
                          fingerprint="AA:BB", distinct_hosts=4, close=True)
    text = ok.read_text()
    assert 'fingerprint=AA:BB' in text and "local DISTINCT = 4" in text
    with pytest.raises(ValueError):
        wrk.write_script(tmp_path / "bad.lua", target_host='x" os.exit() "', target_port=443,
                         fingerprint="AA")


def test_wrong_fingerprint_differs_from_the_certificate(tmp_path: Path) -> None:
    cert = make_rsa_cert(tmp_path, "site.test", bits=2048)
    assert len(cert.sha1) == 59 and cert.wrong_sha1 != cert.sha1
    assert len(cert.wrong_sha1) == len(cert.sha1)


def test_report_ratios_are_paired_medians() -> None:
    notary = [{"rate": 60.0}, {"rate": 30.0}, {"rate": 80.0}]
    base = [{"rate": 100.0}, {"rate": 100.0}, {"rate": 100.0}]
    c = report.compare(notary, base, 0.6)
    assert c["paired_ratios"] == [0.6, 0.3, 0.8] and c["ratio"] == 0.6 and c["meets_target"]
    assert report.compare(notary, base, 0.7)["meets_target"] is False
    with pytest.raises(ValueError):
        report.compare(notary, base[:2], 0.6)


def test_busy_machine_is_flagged() -> None:
    assert report.busy({"nproc": 2, "loadavg_before": [3.5, 1, 1], "loadavg_after": [1, 1, 1]})
    assert not report.busy({"nproc": 2, "loadavg_before": [0.5, 1, 1],
                            "loadavg_after": [1.9, 1, 1]})


@needs_wrk
def test_trivial_app_under_wrk(tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as ps:
        port = free_port()
        ps.start("trivial", trivial_argv(port, 300))
        ps.wait_http("trivial", "127.0.0.1", port)
        status, headers, body = http_request("127.0.0.1", port, "POST", "/target/a.test+443",
                                             body=b"fingerprint=AA")
        assert status == 200 and len(body) == 300
        script = wrk.write_script(tmp_path / "s.lua", target_host="a.test", target_port=443,
                                  fingerprint="AA")
        r = wrk.run_wrk(f"http://127.0.0.1:{port}", script, threads=1, connections=2,
                        seconds=1)
    assert r.requests > 0 and r.socket_errors == 0
    assert r.statuses == {"200": r.requests}
    assert r.cache_status == {"converge-notary; hit": r.requests}


def test_wait_reports_a_process_that_exits(tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as ps:
        ps.start("dies", [sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"])
        with pytest.raises(BenchError, match="exited with code 3"):
            ps.wait_http("dies", "127.0.0.1", free_port(), timeout=10)


@contextlib.contextmanager
def s_server(tmp_path: Path) -> Iterator[int]:
    """A local ``openssl s_server`` with an RSA certificate; yields its port."""
    cert = make_rsa_cert(tmp_path / "target")
    with Processes(tmp_path / "logs") as ps:
        port = free_port()
        ps.start("s_server", stime.s_server_argv(cert, "127.0.0.1", port))
        ps.wait_tcp("s_server", "127.0.0.1", port)
        yield port


@needs_openssl
def test_s_time_against_s_server(tmp_path: Path) -> None:
    with s_server(tmp_path) as port:
        h = stime.s_time("127.0.0.1", port, 1)
    assert h.connections > 0 and h.rate > 0


def _probe_doc(notary_cpu: dict[str, float], rate_ratio: float) -> dict[str, object]:
    base = {"client_cpu_us_per_handshake": 600.0, "signature_cpu_us": 250.0, "rate": 800.0}
    return {k: {"notary": {"server_cpu_us_per_request": c}, "connections": 16,
                "compare": {"ratio": rate_ratio}, "trials": {"baseline": [base, base]}}
            for k, c in notary_cpu.items()}


def test_probe_goals_against_the_floor() -> None:
    """floor = s_time client CPU + one signature; each goal met or not by its own figure."""
    good = report.probe_goals(_probe_doc({
        "forced_probes": 1000.0, "forced_probes_both": 1200.0, "forced_probes_thread": 1000.0,
    }, 0.85))
    assert good is not None and good["floor_us"] == 850.0
    assert [g["met"] for g in good["goals"]] == [True, True, True, True]
    # twin: over the floor factor, under the rate, too costly with --verifier both, a slower
    # driver: every goal fails
    bad = report.probe_goals(_probe_doc({
        "forced_probes": 1100.0, "forced_probes_both": 1500.0, "forced_probes_thread": 1000.0,
    }, 0.70))
    assert bad is not None and [g["met"] for g in bad["goals"]] == [False, False, False, False]
    assert report.probe_goals({}) is None
    assert good["library_floor_us"] is None  # no library measurement in these trials


def test_probe_library_floor_ratio() -> None:
    """The notary's CPU over the probe library's own handshake plus the signature."""
    doc = _probe_doc({"forced_probes": 1000.0}, 0.85)
    for t in doc["forced_probes"]["trials"]["baseline"]:  # type: ignore[index]
        t["library_handshake_cpu_us"] = 150.0
    pg = report.probe_goals(doc)
    assert pg is not None and pg["library_floor_us"] == 400.0
    assert pg["scenarios"]["forced_probes"]["library_floor_ratio"] == 2.5
    assert pg["scenarios"]["forced_probes"]["floor_ratio"] == 1000.0 / 850.0


@needs_openssl
def test_library_handshake_against_s_server(tmp_path: Path) -> None:
    with s_server(tmp_path) as port:
        assert library_handshake_cpu_us("127.0.0.1", port, seconds=0.5) > 0


def test_library_handshake_against_a_closed_port_fails() -> None:
    """Twin: no handshake is a BenchError, not a figure."""
    with pytest.raises(BenchError):
        library_handshake_cpu_us("127.0.0.1", free_port(), seconds=0.5)


@needs_openssl
def test_s_time_against_a_closed_port_fails() -> None:
    with pytest.raises(BenchError):
        stime.s_time("127.0.0.1", free_port(), 1)


@needs_wrk
@needs_openssl
def test_one_tiny_run_of_every_scenario(tmp_path: Path) -> None:
    # with the warm-up: cold, a 1 s trial of live probes once answered nothing under a
    # loaded CI machine (the notary's first probes still starting when wrk stopped)
    opts = Options(seconds=1, trials=1, connections=4, probe_connections=2, distinct_hosts=16,
                   fetch_clients=1, warmup=True, out_json=None, out_md=None,
                   work_dir=tmp_path)
    doc = run(opts)
    sc = doc["scenarios"]
    assert set(sc) == set(Options.scenarios)
    for row in sc.values():
        assert row["notary"]["requests"] > 0 and row["notary"]["unexpected"] == 0
        assert row["baseline"]["rate"] > 0 and row["compare"]["ratio"] > 0
    assert sc["cached_keepalive"]["notary"]["cache_status"] == {
        "converge-notary; hit": sc["cached_keepalive"]["notary"]["requests"]}
    v = sc["forced_probes"]["verification"]
    assert v["probes_counted"] is not None and v["probes_counted"] >= v["requests"] > 0
    # the 2-worker notary answers for both workers on its one metrics endpoint
    v2 = sc["forced_probes_2w"]["verification"]
    assert v2["probes_counted"] is not None and v2["probes_counted"] >= v2["requests"] > 0
    pg = doc["probe_goals"]
    assert pg["handshake_client_cpu_us"] > 0 and pg["signature_cpu_us"] > 0
    assert pg["library_handshake_cpu_us"] > 0
    assert pg["scenarios"]["forced_probes"]["library_floor_ratio"] > 0
    assert {g["goal"][:2] for g in pg["goals"]} == {"1.", "2.", "3.", "4."}
    assert "Live probes against the floor" in report.render_markdown(doc)
    json.dumps(doc)  # machine-readable as written
    md = report.render_markdown(doc)
    for row in sc.values():
        assert row["title"] in md


def test_run_all_skips_missing_suites(tmp_path: Path) -> None:
    listed = run_all.suites(tmp_path)
    names = {name: cmd for name, cmd, _ in listed}
    assert names["notary"] is not None
    assert names["client"] is None and names["replay"] is None
    (tmp_path / "bench" / "client").mkdir(parents=True)
    (tmp_path / "bench" / "client" / "bench_client.py").write_text("")
    (tmp_path / "bench" / "replay").mkdir(parents=True)
    (tmp_path / "bench" / "replay" / "bench_replayer.py").write_text("")
    found = {n: c for n, c, _ in run_all.suites(tmp_path)}
    assert found["client"] is not None and found["replay"] is not None
    assert found["replay"][-1].endswith("bench_replayer.py")
    # the repeated runs (quiet and busy) take the single ladder's place when present
    (tmp_path / "bench" / "replay" / "replay_runs.py").write_text("")
    found = {n: c for n, c, _ in run_all.suites(tmp_path)}
    assert found["replay"] is not None and found["replay"][-1] == "bench.replay.replay_runs"
    assert names["ingest-command"] is None
    assert names["client-runs"] is None
    (tmp_path / "bench" / "client" / "client_runs.py").write_text("")
    found = {n: c for n, c, _ in run_all.suites(tmp_path)}
    assert found["client-runs"] is not None and found["client-runs"][-1] == (
        "bench.client.client_runs")


def _client_result(kept: float, new: float, load: float) -> dict[str, object]:
    return {"when": "t", "machine": {"loadavg_before": [load, 0, 0], "loadavg_after": [load]},
            "ratios": {"one_notary_over_raw_request_paired": kept,
                       "one_notary_new_connection_over_raw_request_paired": new}}


def test_client_runs_report_median_and_spread_against_the_goal() -> None:
    from bench.client import client_runs

    runs = [client_runs.run_figures(_client_result(k, n, 0.5))
            for k, n in ((0.6, 1.25), (0.5, 1.35), (0.7, 1.28))]
    s = client_runs.summarise(runs)
    assert s["check_new_connection_over_bare_legacy_request"] == {
        "median": 1.28, "min": 1.25, "max": 1.35, "runs": 3}
    assert s["check_over_bare_legacy_request"]["median"] == 0.6
    assert "legacy_check_over_bare_legacy_request" not in s  # no run had it
    doc = {"runs_per_condition": 3, "machine": {"cpu": "x", "cpus": 2},
           "quiet": s, "busy": client_runs.summarise(runs[:1])}
    md = client_runs.markdown(doc)
    assert "| check on a new connection / bare TLS request | 1.280 (1.250-1.350) | " \
        "1.250 (1.250-1.250) | <= 1.3 |" in md
    # twin: the summary's goal rows follow the median, met and not met
    from bench import summary

    rows = list(summary._client_runs({"goal": 1.3, "quiet": s, "busy": client_runs.summarise(
        [client_runs.run_figures(_client_result(0.6, 1.4, 3.0))])}))
    verdicts = {r[0]: r[3] for r in rows}
    assert verdicts["client, median of 3 runs, quiet: check on a new connection / bare TLS "
                    "request"] == "yes"
    assert verdicts["client, median of 1 runs, busy: check on a new connection / bare TLS "
                    "request"] == "NO"


def test_results_go_to_var_unless_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.paths import ROOT, results_path

    monkeypatch.delenv("CONVERGE_RECORD", raising=False)
    assert results_path("docs/benchmarks.md") == ROOT / "var" / "results" / "docs/benchmarks.md"
    # twin: make bench-record writes the tracked file
    monkeypatch.setenv("CONVERGE_RECORD", "1")
    assert results_path("docs/benchmarks.md") == ROOT / "docs" / "benchmarks.md"


def test_bench_summary_lists_figures_against_goals(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench import summary

    monkeypatch.setenv("CONVERGE_RECORD", "1")  # the recorded results in the repository
    rows = summary.rows()
    probes = [r for r in rows if r[0].startswith("notary forced_probes:")]
    assert probes and probes[0][2] == "80%" and probes[0][3] in ("yes", "NO")
    assert "no results" not in summary.render(rows)
    # twin: with nothing recorded yet every suite says so, nothing raises
    monkeypatch.setattr(summary, "results_path", lambda rel: Path("/nonexistent") / rel)
    assert all("no results" in r[0] for r in summary.rows())


@pytest.mark.timeout(600)
def test_ingest_benchmark_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "ingest.json"
    r = subprocess.run([sys.executable, "-m", "bench.replay.ingest", "--quick", "--work",
                        str(tmp_path / "work"), "--out", str(out), "--md",
                        str(tmp_path / "benchmarks.md")], capture_output=True,
                       text=True, timeout=580, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert set(doc["layouts"]) == {"canonical", "nfdump-legacy", "nfdump-new"}
    for v in doc["layouts"].values():
        assert v["flows"] > 10_000 and v["flows_per_s_one_core"] > 0
        assert v["ratio_to_plain"] > 0 and v["peak_rss_mb"] > 0
    assert doc["two_cores"]["speedup"] > 0 and doc["per_row_oracle"]["flows"] > 10_000
    assert set(doc["goals"]) == {"flows_per_s_one_core", "ratio_to_plain_read_sort",
                                 "peak_rss_mb"}
    md = (tmp_path / "benchmarks.md").read_text()
    assert "## Trace ingest" in md and "| canonical | " in md
    assert f"{doc['layouts']['nfdump-new']['flows']:,}" in md


def test_workload_read_ab_reads_with_each_trees_own_package(tmp_path: Path) -> None:
    """A tiny A/B of reading a workload, this tree against itself: both sides read every
    row. The twin: a directory that is no checkout is refused."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "ab.json"
    argv = [sys.executable, "-m", "bench.replay.workload_read_ab", "--pairs", "1", "--rows",
            "2000", "--out", str(out), "--baseline"]
    r = subprocess.run(argv + [str(root)], capture_output=True, text=True, timeout=300,
                       cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [x["rows"] for x in doc["runs"]["this"] + doc["runs"]["baseline"]] == [2000, 2000]
    assert doc["ratio_this_to_baseline"] > 0 and doc["figures"]["us_per_row"]["this"]["n"] == 1
    r = subprocess.run(argv + [str(tmp_path)], capture_output=True, text=True, timeout=300,
                       cwd=root)
    assert r.returncode == 2 and "not a checkout" in r.stderr


def test_sections_of_a_shared_markdown_file_survive_each_other(tmp_path: Path) -> None:
    from bench.paths import keep_sections, write_section

    md = tmp_path / "benchmarks.md"
    md.write_text("# Benchmarks\n\nnotary table v1\n")
    write_section(md, "ingest", "bench/replay/ingest.py", "## Trace ingest\n\nrun 1\n")
    write_section(md, "ingest", "bench/replay/ingest.py", "## Trace ingest\n\nrun 2\n")
    text = md.read_text()
    assert "run 2" in text and "run 1" not in text and text.count("## Trace ingest") == 1
    assert text.startswith("# Benchmarks\n\nnotary table v1")
    # the notary suite regenerates the whole file: the ingest section is kept...
    regenerated = keep_sections(md, "# Benchmarks\n\nnotary table v2\n")
    assert "notary table v2" in regenerated and "run 2" in regenerated
    assert "notary table v1" not in regenerated
    # ...and twin: a file without sections gives the new text unchanged
    plain = tmp_path / "plain.md"
    plain.write_text("# Benchmarks\n\nold\n")
    assert keep_sections(plain, "# new\n") == "# new\n"


GO_LINE = ("BenchmarkNotaryRoundTripPaired-2   \t     300\t  11208997 ns/op\t       868.8 "
           "p50-µs-extended\t      1988 p50-µs-extended-new-connection\t     0.4801 "
           "ratio-extended\t     1.126 ratio-extended-new-connection\t    0.8957 ratio-legacy\t"
           "     1.162 ratio-raw-extended\n")


def test_client_runs_read_the_go_benchmark_and_report_it_against_the_goal() -> None:
    from bench import summary
    from bench.client import client_runs

    fig = client_runs.go_figures("goos: linux\n" + GO_LINE + "PASS\n")
    assert fig == {"check_over_bare_legacy_request": 0.4801,
                   "check_new_connection_over_bare_legacy_request": 1.126,
                   "legacy_check_over_bare_legacy_request": 0.8957,
                   "bare_extended_over_bare_legacy_request": 1.162}
    # twin: output without the paired line is an error, not an empty run
    with pytest.raises(RuntimeError):
        client_runs.go_figures("goos: linux\nPASS\n")
    over = {**fig, "check_new_connection_over_bare_legacy_request": 1.45}
    runs = [{"loadavg_before": [0.5], **f} for f in (fig, fig, over)]
    go = {"rounds": 300, "quiet": client_runs.summarise(runs),
          "busy": client_runs.summarise([{"loadavg_before": [2.0], **over}])}
    py = client_runs.summarise([client_runs.run_figures(_client_result(0.6, 1.2, 0.5))])
    doc = {"runs_per_condition": 3, "machine": {"cpu": "x", "cpus": 2},
           "quiet": py, "busy": py, "go": go}
    md = client_runs.markdown(doc)
    assert "| Go | check on a new connection / bare TLS request | 1.126 (1.126-1.450) | " \
        "1.450 (1.450-1.450) | <= 1.3 |" in md
    assert "| Python | check (kept connection) / bare TLS request | 0.600" in md
    assert "Load average (1 min) before the runs: 0.50-2.00." in md
    verdicts = {r[0]: r[3] for r in summary._client_runs({"goal": 1.3, **doc})}
    assert verdicts["client-go, median of 3 runs, quiet: check on a new connection / bare "
                    "TLS request"] == "yes"
    assert verdicts["client-go, median of 1 runs, busy: check on a new connection / bare "
                    "TLS request"] == "NO"
    # without Go the section is the Python client's alone
    assert "| Go |" not in client_runs.markdown({k: v for k, v in doc.items() if k != "go"})


def _ingest_command_doc(cpu: dict[str, float], rss: float = 600.0) -> dict[str, Any]:
    layouts = {name: {"flows": 2_000_000,
                      "command": {"cpu_s": s, "peak_rss_mb": rss},
                      "columns": {"cpu_s": s / 2}} for name, s in cpu.items()}
    return {"layouts": layouts,
            "machine": {"load_average_start": [0.5, 0.6, 0.7], "load_average_end": [1, 1, 1]}}


def test_ingest_runs_report_median_and_spread_against_the_goal() -> None:
    from bench import summary
    from bench.replay import ingest_runs

    quiet = ingest_runs.aggregate([_ingest_command_doc({"legacy": s, "canonical": 1.6})
                                   for s in (1.9, 2.1, 1.95)])
    v = quiet["layouts"]["legacy"]
    assert v["cpu_s"] == {"median": 1.95, "min": 1.9, "max": 2.1, "n": 3}
    assert round(v["flows_per_cpu_s"]["median"]) == round(2_000_000 / 1.95) and v["met"]
    # twins: a median over 2 s misses the goal; so does one run over the RSS bound
    busy = ingest_runs.aggregate([_ingest_command_doc({"legacy": s, "canonical": 1.6},
                                                      rss=r)
                                  for s, r in ((2.2, 600.0), (2.05, 600.0), (1.9, 1100.0))])
    assert not busy["layouts"]["legacy"]["met"] and not busy["met"]
    assert not busy["layouts"]["canonical"]["met"]  # its RSS
    doc = {"started_at": "a", "finished_at": "b", "commit": "c", "runs_per_condition": 3,
           "trials": 3, "scale": 0.5, "machine": {"cpus": 2, "cpu": "x", "python": "3.11"},
           "goal": {"flows_per_cpu_s": 1e6, "peak_rss_mb": 1024},
           "conditions": {"quiet": quiet, "busy": busy}}
    md = ingest_runs.render(doc)
    assert "| legacy | ≥ 1,000,000, ≤ 1,024 MB | 1,025,641 (952,381-1,052,632) | 1.95 " in md
    assert "**no**" in md and "* busy run 3: 0.50, 0.60, 0.70 / 1.00, 1.00, 1.00" in md
    verdicts = {r[0]: r[3] for r in summary._ingest_runs(doc)}
    assert verdicts["ingest, whole command, median of 3 runs, quiet, legacy: flows per "
                    "CPU-second"] == "yes"
    assert verdicts["ingest, whole command, median of 3 runs, busy, legacy: flows per "
                    "CPU-second"] == "NO"


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
@pytest.mark.parametrize("server,placement",
                         [("haproxy", "one-core"), ("raw", "server-with-burner")])
def test_replayer_bench_pins_a_placement_and_counts_the_servers_cpu(
        tmp_path: Path, server: str, placement: str) -> None:
    """One short busy step: every request answered by the chosen trivial server, the
    placement recorded, and the server's CPU counted per request. The twin: a placement
    without the burner it places is refused before anything runs."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "replay.json"
    argv = [sys.executable, "bench/replay/bench_replayer.py", "--rates", "400",
            "--step-seconds", "0.5", "--attempts", "1", "--server", server,
            "--placement", placement, "--out", str(out)]
    r = subprocess.run(argv + ["--busy"], capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    step = doc["steps"][0]
    assert (doc["server"], doc["placement"], doc["busy"]) == (server, placement, True)
    pins = {"one-core": {"sender": [0], "burner": [1], "server": [0]},
            "server-with-burner": {"sender": [0], "burner": [1], "server": [1]}}
    assert doc["cpus_allowed"] == pins[placement]
    assert step["sent"] == step["completed"] == 200 and step["errors"] == 0
    assert step["server_cpu_us_per_request"] > 0
    out.unlink()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 2 and "needs --busy" in r.stderr and not out.exists()


def _replay_doc(sustained: float, p99: float, server_us: float) -> dict[str, Any]:
    step = {"rate": 20_000.0, "dispatch_p99_ms": p99, "wire_p99_ms": p99 + 0.1, "errors": 0,
            "sender_cpu_us_per_request": 30.0, "server_cpu_us_per_request": server_us}
    return {"steps": [step], "max_rate_all_lower_rates_also_under_limit": sustained,
            "loadavg_before": [0.5, 0.6, 0.7], "loadavg_after": [1.0, 1.0, 1.0]}


def test_replay_runs_report_every_condition_against_the_goal() -> None:
    """Three conditions, each a column pair of the table and its own summary rows; the busy
    one (its p99 over the limit) is the twin that must read **no**."""
    from bench import summary
    from bench.replay import replay_runs

    runs = {"quiet": [_replay_doc(28_000, 1.0, 14.0)] * 3,
            "busy": [_replay_doc(12_000, 40.0, 15.0), _replay_doc(12_000, 20.0, 15.0),
                     _replay_doc(24_000, 3.0, 15.0)],
            "busy-own-core": [_replay_doc(24_000, 2.5, 16.0)] * 3}
    conditions = replay_runs.aggregate(runs)
    assert conditions["busy"]["p99_ms_at_goal"]["median"] == 20.0
    assert [c["met"] for c in conditions.values()] == [True, False, True]
    assert conditions["busy-own-core"]["server_cpu_us_at_goal"]["median"] == 16.0
    doc = {"started_at": "a", "finished_at": "b", "commit": "c", "runs_per_condition": 3,
           "rates": "20000", "step_seconds": 3.0, "senders": 1,
           "machine": {"cpus": 2, "cpu": "x", "python": "3.11"},
           "goal": {"rate": 20_000.0, "p99_ms": 10.0}, "conditions": conditions}
    md = replay_runs.render(doc)
    assert ("| send lateness p99 at 20,000/s (ms) | < 10 | 1.00 (1.00-1.00) | yes | "
            "20.00 (3.00-40.00) | **no** | 2.50 (2.50-2.50) | yes |") in md
    assert "| the server's CPU per request at 20,000/s (µs) | - | 14.0" in md
    assert "*busy-own-core* runs the same burner" in md and "* busy-own-core run 3: " in md
    verdicts = {r[0]: r[3] for r in summary._replay_runs(doc)}
    assert verdicts["replay, median of 3 runs, busy: send lateness p99 at 20,000/s"] == "NO"
    assert verdicts["replay, median of 3 runs, busy-own-core: send lateness p99 at "
                    "20,000/s"] == "yes"


def test_replay_runs_drop_the_pinned_condition_on_one_cpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On one usable CPU there is nothing to pin to: the runs are quiet and busy only,
    instead of a failing benchmark. The twin: two CPUs run all three conditions."""
    from bench.replay import replay_runs

    def fake(cond: str, rates: str, step: float, out: Path, senders: int) -> dict[str, Any]:
        return _replay_doc(20_000, 2.0, 15.0)

    monkeypatch.setattr(replay_runs, "one_run", fake)
    argv = ["--runs", "1", "--out", str(tmp_path / "r.json"), "--md", str(tmp_path / "b.md")]
    for cpus, expected in (({0}, ["quiet", "busy"]), ({0, 1}, list(replay_runs.REPLAY_CONDITIONS))):
        monkeypatch.setattr(replay_runs.os, "sched_getaffinity", lambda pid, c=cpus: c)
        assert replay_runs.main(argv) == 0
        doc = json.loads((tmp_path / "r.json").read_text())
        assert list(doc["conditions"]) == expected


def test_runs_records_say_which_machine_and_boot_they_ran_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A runs record names the kernel's build and this boot's identity, and its section says
    them, so two records can be told apart as one machine or two. The twin: a record written
    before they were kept renders without them (nothing made up)."""
    import platform

    from bench.paths import machine, where
    from bench.replay import replay_runs

    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    m = machine()
    assert (m["kernel"], m["boot_id"], m["cpus"]) == (platform.release(), boot, os.cpu_count())
    assert where(m) == f", kernel {platform.release()}, boot {boot[:8]}"
    assert where({"cpus": 2, "cpu": "x", "python": "3.11"}) == ""
    monkeypatch.setattr(replay_runs, "one_run",
                        lambda cond, rates, step, out, senders: _replay_doc(20_000, 2.0, 15.0))
    monkeypatch.setattr(replay_runs.os, "sched_getaffinity", lambda pid: {0})
    md = tmp_path / "b.md"
    assert replay_runs.main(["--runs", "1", "--out", str(tmp_path / "r.json"),
                             "--md", str(md)]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["machine"]["boot_id"] == boot
    assert f"boot {boot[:8]}), Python" in md.read_text()


def test_thread_cpu_seconds_counts_a_short_burst_to_the_microsecond() -> None:
    """A child that spins 3 ms between two readings reads as 3 ms or more (10 ms clock ticks
    would often read it as none). The twin: the same child sleeping between two readings
    reads as under 2 ms."""
    from bench.notary.procs import thread_cpu_seconds

    code = ("import sys, time\nfor line in sys.stdin:\n"
            "    if line == 'spin\\n':\n"
            "        end = time.process_time() + 0.003\n"
            "        while time.process_time() < end:\n            pass\n"
            "    sys.stdout.write('done\\n')\n    sys.stdout.flush()\n")
    with subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdin is not None

        def used(command: str) -> float:
            before = thread_cpu_seconds(child.pid)
            child.stdin.write(command + "\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            time.sleep(0.05)  # the kernel's books closed on the child's last run
            after = thread_cpu_seconds(child.pid)
            assert before is not None and after is not None
            return after - before

        used("nap")  # the first exchange pays the child's first reads
        spun, napped = used("spin"), used("nap")
        child.stdin.close()
    assert spun >= 0.003, spun
    assert 0 <= napped < 0.002, napped


def test_replayer_bench_without_haproxy_says_so(tmp_path: Path) -> None:
    """``--server haproxy`` where haproxy is not on the PATH: a clear error before any
    process starts and no results file, instead of a traceback."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "replay.json"
    r = subprocess.run([sys.executable, "bench/replay/bench_replayer.py", "--rates", "400",
                        "--step-seconds", "0.5", "--attempts", "1", "--server", "haproxy",
                        "--out", str(out)], capture_output=True, text=True, timeout=120,
                       cwd=root, env={"PATH": str(tmp_path)})
    assert r.returncode == 2 and "haproxy is not installed" in r.stderr, r.stderr[-1000:]
    assert not out.exists()


def test_hook_overhead_bench_runs_small_and_refuses_nonsense(tmp_path: Path) -> None:
    """A tiny run writes both sides' figures and their ratio; the twin: zero pairs is a
    usage error (exit 2) and writes nothing."""
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "h.json"
    argv = [sys.executable, "bench/client/hook_overhead.py", "--records", "200", "--out",
            str(out)]
    r = subprocess.run(argv + ["--pairs", "1"], capture_output=True, text=True, timeout=120,
                       cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert len(doc["us_per_recv"]["plain"]) == len(doc["us_per_recv"]["guarded"]) == 1
    assert doc["ratio_of_medians"] > 0 and doc["machine"]["boot_id"]
    out.unlink()
    r = subprocess.run(argv + ["--pairs", "0"], capture_output=True, text=True, timeout=120,
                       cwd=root)
    assert r.returncode == 2 and "must be positive" in r.stderr and not out.exists()
