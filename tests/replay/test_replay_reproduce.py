"""``replay reproduce`` end to end at a tiny scale, and stopped with Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from replay.services import Progress

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / ".venv" / "bin" / "replay"
needs_cli = pytest.mark.skipif(not REPLAY.exists(), reason="replay not installed (make setup)")

TITLES = ("Trace stages", "Table 1", "Table 2", "Table 3", "Performance and overhead",
          "CA trust vs perspectives", "Thesis Figure 17", "Table 4")


@needs_cli
@pytest.mark.timeout(300)
def test_reproduce_runs_every_step_and_prints_every_table(tmp_path: Path) -> None:
    out = tmp_path / "rp"
    r = subprocess.run([str(REPLAY), "reproduce", "--out", str(out), "--scale", "0.005",
                        "--duration", "40", "--speed", "4", "--world-sites", "80",
                        "--worlds", "thesis,zipf:1.0", "--no-overhead"],
                       capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    for title in TITLES:
        assert title in r.stdout, title
    doc = json.loads((out / "reproduce.json").read_text())
    assert doc["stopped"] is None and len(doc["done"]) == 8
    md = (out / "reproduce.md").read_text()
    assert all(title in md for title in TITLES)
    assert "circular" in md and "returns its input" in md  # the thesis-popularity world
    assert "done in" in r.stderr  # every step reported its progress
    for f in ("report/report.md", "report/per-site.csv", "compare/comparison.json",
              "worlds/thesis/analysis/summary.json", "client-cost.json"):
        assert (out / f).stat().st_size > 0, f


@needs_cli
@pytest.mark.timeout(200)
def test_ctrl_c_stops_cleanly_and_keeps_what_is_done(tmp_path: Path) -> None:
    out = tmp_path / "rp"
    proc = subprocess.Popen([str(REPLAY), "reproduce", "--out", str(out), "--scale", "0.005",
                             "--duration", "600", "--speed", "1", "--worlds", ""],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "results.csv").exists():  # the replay has started
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted during run" in stderr
    doc = json.loads((out / "reproduce.json").read_text())
    assert doc["done"] == ["synth", "farm and notary", "workload"] and doc["stopped"] == "run"
    assert (out / "wl.csv").stat().st_size > 0  # what was done is kept
    # no server of the run is left behind
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout


def test_progress_line_has_an_eta() -> None:
    import io

    p = Progress("step", 100, " s", stream=io.StringIO())
    p.t0 -= 10  # ten seconds in
    line = p.line(25)
    assert "25.0%" in line and "ETA 30s" in line and "elapsed 10s" in line
    assert "ETA ?" in p.line(0)  # twin: nothing done yet, no guess
