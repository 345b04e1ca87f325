"""End to end through the console scripts: synth -> farm -> notary -> workload -> run ->
report, with the real notary binary and real TLS probes of the farm."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from replay_support import NOTARY, REPLAY, free_port, run_cli, running, wait_file, wait_http

needs_notary = pytest.mark.skipif(not NOTARY.exists(),
                                  reason=f"notary binary not built yet ({NOTARY} absent)")
needs_replay = pytest.mark.skipif(not REPLAY.exists(),
                                  reason=f"{REPLAY} absent: pip install -e . first")


def _ok(*args: str) -> str:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """A tiny synthetic trace, its farm (serving) and a notary (plain HTTP) pointed at it."""
    if not NOTARY.exists():
        pytest.skip(f"notary binary not built yet ({NOTARY} absent)")
    if not REPLAY.exists():
        pytest.skip(f"{REPLAY} absent")
    d = tmp_path_factory.mktemp("e2e")
    _ok("synth", "--out", str(d / "syn"), "--scale", "0.005", "--duration", "20", "--seed", "7",
        "--formats", "canonical,nfdump-legacy,nfdump-new")
    p = {"main": free_port(), "slow": free_port(), "dead": free_port(), "silent": free_port(),
         "notary": free_port()}
    farm_args = ["farm", "--spec", str(d / "syn" / "farm-spec.json"), "--state", str(d / "farm"),
                 "--port", str(p["main"]), "--slow-port", str(p["slow"]),
                 "--dead-port", str(p["dead"]), "--silent-port", str(p["silent"]),
                 "--silent-share", "0.5", "--slow-delay", "0.5",
                 "--rotate-period", "3600"]
    _ok(*farm_args, "--prepare-only")
    with running([str(REPLAY), *farm_args, "--duration", "110"], d / "farm.log") as farm:
        wait_file(d / "farm" / "ready", proc=farm)
        notary_argv = [str(NOTARY), "serve", "--no-tls", "--data-dir", str(d / "notary"),
                       "--listen", f"127.0.0.1:{p['notary']}", "--allow-target", "127.0.0.0/8",
                       "--hosts-file", str(d / "farm" / "hosts")]
        with running(notary_argv, d / "notary.log") as notary:
            wait_http(f"http://127.0.0.1:{p['notary']}/", proc=notary)
            yield {"dir": d, "ports": p, "url": f"http://127.0.0.1:{p['notary']}"}


def _roles(d: Path) -> dict[str, str]:
    with (d / "farm" / "targets.csv").open() as fh:
        return {r["host"]: r["role"] for r in csv.DictReader(fh)}


@needs_notary
@needs_replay
def test_synth_farm_notary_replay_report(world: dict[str, object]) -> None:
    d = world["dir"]
    assert isinstance(d, Path)
    wl = d / "wl.csv"
    _ok("workload", str(d / "syn" / "flows-nfdump-legacy.csv"), "--names",
        str(d / "syn" / "names.txt"), "--targets", str(d / "farm" / "targets.csv"),
        "-o", str(wl))
    stages = json.loads((d / "wl.csv.stages.json").read_text())
    assert stages["notary_requests"] > 5 and stages["client_cache_hits"] > 0
    assert stages["malformed"] == 0
    assert stages["kept"] == stages["named"] + stages["unnamed_dropped"]
    assert stages["named"] == stages["notary_requests"] + stages["client_cache_hits"]

    # the canonical and new nfdump layouts of the same trace give the same stage counts
    for name in ("flows.csv", "flows-nfdump-new.csv"):
        _ok("workload", str(d / "syn" / name), "--names", str(d / "syn" / "names.txt"),
            "--targets", str(d / "farm" / "targets.csv"), "-o", str(d / f"wl-{name}"))
        other = json.loads((d / f"wl-{name}.stages.json").read_text())
        for key in ("kept", "named", "unnamed_dropped", "notary_requests"):
            assert other[key] == stages[key], (name, key)

    results = d / "results.csv"
    _ok("run", str(wl), "--notary", str(world["url"]), "-o", str(results), "--speed", "4",
        "--timeout", "10", "--quiet")
    _ok("report", str(results), "-o", str(d / "rep"), "--stages", str(d / "wl.csv.stages.json"))
    rep = json.loads((d / "rep" / "report.json").read_text())
    # outcome counts add up to the notary requests, and layers to the validations
    assert sum(rep["outcomes"].values()) == rep["requests"] == stages["notary_requests"]
    assert rep["client_hits"] == stages["client_cache_hits"] == rep["layers"]["client"]
    assert rep["outcomes"]["connection-error"] == 0 and rep["outcomes"]["client-timeout"] == 0
    assert rep["unknown_layer_verdicts"] == 0
    verdicts = rep["outcomes"]["200"] + rep["outcomes"]["409"]
    assert rep["layers"]["notary-hit"] + rep["layers"]["notary-miss"] == verdicts

    roles = _roles(d)
    by_role: dict[str, set[str]] = defaultdict(set)
    with results.open() as fh:
        for r in csv.DictReader(fh):
            if r["kind"] == "request":
                by_role[roles[r["host"]]].add(r["status"])
    assert by_role["mitm"] == {"409"}, "man-in-the-middle entries must come back as mismatches"
    assert by_role["good"] == {"200"}
    assert by_role["dead"] == {"503"}
    assert by_role["slow"] == {"200"}  # 0.5 s handshake delay, inside the 2 s probe timeout
    for f in ("report.md", "table1.csv", "table2.csv", "table3.csv", "figure2-requests.png"):
        assert (d / "rep" / f).exists()


@needs_notary
@needs_replay
def test_tls_notary_pinned_and_wrong_pin(tmp_path: Path, world: dict[str, object]) -> None:
    d = world["dir"]
    assert isinstance(d, Path)
    port = free_port()
    data = tmp_path / "tls-notary"
    argv = [str(NOTARY), "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
            "--allow-target", "127.0.0.0/8", "--hosts-file", str(d / "farm" / "hosts")]
    wl = tmp_path / "wl.csv"
    _ok("workload", str(d / "syn" / "flows.csv"), "--names", str(d / "syn" / "names.txt"),
        "--targets", str(d / "farm" / "targets.csv"), "-o", str(wl), "--no-client-hits")
    with running(argv, tmp_path / "notary.log") as proc:
        wait_file(data / "notary.pem", proc=proc)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"https://127.0.0.1:{port}/", context=ctx, timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        good = tmp_path / "good.csv"
        _ok("run", str(wl), "--notary", f"https://127.0.0.1:{port}", "-o", str(good),
            "--pin-cert", str(data / "notary.pem"), "--limit", "5", "--speed", "10", "--quiet")
        wrong_pin = tmp_path / "wrong.pem"
        shutil.copy(d / "farm" / "pki" / "root-0.pem", wrong_pin)
        bad = tmp_path / "bad.csv"
        _ok("run", str(wl), "--notary", f"https://127.0.0.1:{port}", "-o", str(bad),
            "--pin-cert", str(wrong_pin), "--limit", "5", "--speed", "10", "--quiet")
        # the operator-published SHA-1 pin (GET / pin_sha1) is checked, then pinned
        req = urllib.request.Request(f"https://127.0.0.1:{port}/",
                                     headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            pin_sha1 = json.loads(resp.read())["pin_sha1"]
        by_sha1 = tmp_path / "sha1.csv"
        _ok("run", str(wl), "--notary", f"https://127.0.0.1:{port}", "-o", str(by_sha1),
            "--pin-sha1", pin_sha1, "--limit", "3", "--speed", "10", "--quiet")
        wrong = run_cli("run", str(wl), "--notary", f"https://127.0.0.1:{port}", "-o",
                        str(tmp_path / "x.csv"), "--pin-sha1", "00" * 20, "--limit", "3")
        assert wrong.returncode == 2 and "does not match" in wrong.stderr
    with by_sha1.open() as fh:
        assert all(r["status"] for r in csv.DictReader(fh))
    with good.open() as fh:
        statuses = [r["status"] for r in csv.DictReader(fh)]
    assert len(statuses) == 5 and all(s in ("200", "409", "503") for s in statuses)
    with bad.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 5 and all(r["status"] == "" and r["error"] for r in rows)


@needs_replay
def test_cli_exit_codes(tmp_path: Path) -> None:
    bad_input = run_cli("synth", "--out", str(tmp_path / "x"), "--scale", "0")
    assert bad_input.returncode == 2 and "scale" in bad_input.stderr
    io_failure = run_cli("report", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "r"))
    assert io_failure.returncode == 1 and "cannot open" in io_failure.stderr
    usage = run_cli("run")
    assert usage.returncode == 2
    strict = tmp_path / "flows.csv"
    strict.write_text("start,end,src,dst,sport,dport,proto,packets,bytes\n"
                      "1,2,10.0.0.1,10.0.0.2,1,443,6,1,1\n1,2,10.0.0.1,nope,1,443,6,1,1\n")
    skipped = run_cli("workload", str(strict), "-o", str(tmp_path / "w.csv"))
    assert skipped.returncode == 0 and f"{strict}:3:" in skipped.stderr
    failed = run_cli("workload", str(strict), "-o", str(tmp_path / "w2.csv"), "--strict")
    assert failed.returncode == 2 and f"{strict}:3:" in failed.stderr
    wl = tmp_path / "w.csv"
    for flag, value, message in (("--limit", "-1", "limit must be 0 or more"),
                                 ("--max-duration", "nan", "max duration must be 0 or more")):
        refused = run_cli("run", str(wl), "--notary", "http://127.0.0.1:1", "-o",
                          str(tmp_path / "r.csv"), flag, value)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert not (tmp_path / "r.csv").exists()  # refused before anything is written


@needs_replay
def test_run_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    wl = tmp_path / "wl.csv"
    rows = ["offset,kind,client,host,port,fingerprint,ssl_bytes"]
    rows += [f"{i * 0.5:.1f},request,c1,s{i}.test,443,AA,1" for i in range(120)]
    wl.write_text("\n".join(rows) + "\n")
    out = tmp_path / "results.csv"
    proc = subprocess.Popen([str(REPLAY), "run", str(wl), "--notary",
                             f"http://127.0.0.1:{free_port()}", "-o", str(out), "--quiet"],
                            stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    summary = json.loads((tmp_path / "results.csv.summary.json").read_text())
    assert summary["stopped_early"] is True
    assert 1 <= summary["sent"] < 120
    with out.open() as fh:
        assert len(list(csv.DictReader(fh))) == summary["events"]
