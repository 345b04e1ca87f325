"""The synthetic university hour against one notary on this machine, bounded.

synth (--scale, --duration) -> farm -> notary (subprocess) -> workload -> run (--speed,
--max-duration) -> report. Writes the report under bench/results/replay-hour/ and a JSON
summary (share answered, 503s, dropped connections, latency, side by side with the study)
to bench/results/replay-hour.json.

Scale 1 at speed 1 is the study's hour (~574k notary requests, ~1 h). A time-compressed
equivalent: --scale 0.25 --speed 4 keeps the notary's request rate while shortening the
run 4x (fewer clients and sites, so cache behaviour differs a little).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.paths import results_path  # noqa: E402

BIN = ROOT / ".venv" / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(*argv: str) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, timeout=7200)


def wait(pred, what: str, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} not ready")
        time.sleep(0.1)


def ready(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).read()
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--max-duration", type=float, default=900)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, default=ROOT / "var" / "replay-hour")
    ap.add_argument("--notary-arg", action="append", default=[],
                    help="extra argument for notary serve (repeatable)")
    ap.add_argument("--out", type=Path, default=results_path("bench/results"))
    ap.add_argument("--name", default="replay-hour",
                    help="results go to OUT/NAME/ (report) and OUT/NAME.json")
    a = ap.parse_args()
    w = a.work
    w.mkdir(parents=True, exist_ok=True)
    r = str(BIN / "replay")
    run(r, "synth", "--out", str(w / "syn"), "--scale", str(a.scale), "--duration",
        str(a.duration), "--seed", str(a.seed), "--formats", "canonical")
    ports = [free_port() for _ in range(5)]
    farm_args = [r, "farm", "--spec", str(w / "syn" / "farm-spec.json"), "--state",
                 str(w / "farm"), "--port", str(ports[0]), "--slow-port", str(ports[1]),
                 "--dead-port", str(ports[2]), "--silent-port", str(ports[4])]
    run(*farm_args, "--prepare-only")
    run(r, "workload", str(w / "syn" / "flows.csv"), "--names", str(w / "syn" / "names.txt"),
        "--targets", str(w / "farm" / "targets.csv"), "-o", str(w / "wl.csv"))
    (w / "farm" / "ready").unlink(missing_ok=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = (w / "farm.log").open("wb")
        procs.append(subprocess.Popen([*farm_args, "--duration", str(a.max_duration + 120)],
                                      stdout=log, stderr=subprocess.STDOUT))
        wait(lambda: (w / "farm" / "ready").exists(), "farm")
        nlog = (w / "notary.log").open("wb")
        url = f"http://127.0.0.1:{ports[3]}"
        procs.append(subprocess.Popen(
            [str(BIN / "notary"), "serve", "--no-tls", "--data-dir", str(w / "notary"),
             "--listen", f"127.0.0.1:{ports[3]}", "--allow-target", "127.0.0.0/8",
             "--hosts-file", str(w / "farm" / "hosts"), *a.notary_arg],
            stdout=nlog, stderr=subprocess.STDOUT, env=dict(os.environ)))
        wait(lambda: ready(url + "/"), "notary")
        run(r, "run", str(w / "wl.csv"), "--notary", url, "-o", str(w / "results.csv"),
            "--speed", str(a.speed), "--max-duration", str(a.max_duration),
            "--progress-interval", "10")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    rep = a.out / a.name
    run(r, "report", str(w / "results.csv"), "-o", str(rep), "--stages",
        str(w / "wl.csv.stages.json"))
    report = json.loads((rep / "report.json").read_text())
    n = max(1, report["requests"])
    o = report["outcomes"]
    summary = {
        "benchmark": "replay-synthetic-hour",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scale": a.scale, "duration": a.duration, "speed": a.speed, "cpus": os.cpu_count(),
        "requests": report["requests"], "client_hits": report["client_hits"],
        "mean_requests_per_s": report["mean_requests_per_s"],
        "share_answered": (o["200"] + o["409"] + o["503"]) / n,
        "share_200": o["200"] / n, "share_409": o["409"] / n, "share_503": o["503"] / n,
        "share_dropped": o["connection-error"] / n, "share_timeout": o["client-timeout"] / n,
        "layers": report["layers"], "time_to_level": report["time_to_level"],
        "latency_ms": report["latency_ms"], "lateness_p99_ms": report["lateness_p99_ms"],
        "overhead": report["overhead"],
        "study": {"share_202": 0.74, "share_503": 0.20, "share_dropped": 0.06,
                  "share_timeout": 0.001, "mean_requests_per_s": 160,
                  "layers": {"client": 0.77, "notary-hit": 0.21, "notary-miss": 0.01}},
    }
    (a.out / f"{a.name}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
