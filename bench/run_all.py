"""``make bench``: every benchmark suite, one after another.

* ``bench.notary.run``: the notary (always; results in ``bench/results/notary.json`` and
  ``docs/benchmarks.md``), then ``bench.notary.repeat``: its headline figures and the
  transparency log's cost as the median of 3 separate runs, quiet and with a CPU burner
  beside (``bench/results/notary-runs.json`` and a section of ``docs/benchmarks.md``), and
  ``bench.notary.syscalls``: system calls per forced probe, log on and off (needs strace).
* ``bench/client/bench_client.py``, then ``bench.client.client_runs``: the Python and Go
  clients' goal figures over 3 separate runs quiet and 3 busy each
  (``bench/results/client-runs.json``),
  and the replay benchmark (``python -m bench.replay`` if
  ``bench/replay/__main__.py`` exists, else ``bench.replay.replay_runs``: the replayer's
  ladder over 3 separate runs quiet and 3 busy, else ``bench/replay/bench_replayer.py``)
  when present; a missing one is skipped with a message.
* ``bench.replay.ingest``, ``bench.replay.ingest_command`` and ``bench.replay.ingest_runs``
  (trace ingest; the whole ``replay workload --jobs 1`` command as users pay it; the same
  over 3 separate runs quiet and 3 busy),
* ``bench.extended`` (extended vs legacy cached rate), ``bench.scale.run`` (workers, stores,
  metrics, locust vs wrk), ``bench.rootstore.run`` (CA verification cost), ``bench.tlog.run``
  (the transparency log's sequencing rate, a 10-million-entry log) and each client
  language's ``client-libs/<lang>/bench.sh``.

Each suite runs in its own process with a time limit, so one failing suite does not stop the
others. The exit status is non-zero when a suite that ran failed. The run ends with every
figure against its goal (``bench.summary``) and, unless recording, every figure of the runs
records against the recorded one (``bench.compare``: within 15% or not, and on which
machine each was taken).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench import compare, summary
from bench.paths import recording

ROOT = Path(__file__).resolve().parents[1]
SUITE_TIMEOUT = 600.0  # seconds per suite
# the 10-million-entry log is written and read back; the notary suite has 11 scenarios; its
# repeat runs 6 whole runs, as does the ingest's (3 layouts, 3 trials, 2 commands each)
LONG_SUITES = {"tlog": 2400.0, "notary": 1200.0, "notary-runs": 1800.0, "ingest-runs": 1500.0}


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def suites(root: Path = ROOT) -> list[tuple[str, list[str] | None, str]]:
    """(name, argv or None when missing, why missing)."""
    py = _python()
    out: list[tuple[str, list[str] | None, str]] = [
        ("notary", [py, "-m", "bench.notary.run"], ""),
        ("notary-runs", [py, "-m", "bench.notary.repeat"], ""),
        ("notary-syscalls", [py, "-m", "bench.notary.syscalls"], ""),
    ]
    client = root / "bench" / "client" / "bench_client.py"
    out.append(("client", [py, str(client)] if client.is_file() else None,
                f"{client.relative_to(root)} not found"))
    runs = root / "bench" / "client" / "client_runs.py"
    out.append(("client-runs", [py, "-m", "bench.client.client_runs"] if runs.is_file() else None,
                f"{runs.relative_to(root)} not found"))
    replay = root / "bench" / "replay"
    if (replay / "__main__.py").is_file():
        out.append(("replay", [py, "-m", "bench.replay"], ""))
    elif (replay / "replay_runs.py").is_file():
        # the replayer's ladder, 3 separate runs quiet and 3 busy
        out.append(("replay", [py, "-m", "bench.replay.replay_runs"], ""))
    elif (replay / "bench_replayer.py").is_file():
        out.append(("replay", [py, str(replay / "bench_replayer.py")], ""))
    else:
        out.append(("replay", None,
                    "neither bench/replay/__main__.py nor bench/replay/bench_replayer.py found"))
    ext = root / "bench" / "extended" / "bench_extended.py"
    out.append(("extended", [py, str(ext)] if ext.is_file() else None,
                f"{ext.relative_to(root)} not found"))
    ingest = root / "bench" / "replay" / "ingest.py"
    out.append(("ingest", [py, "-m", "bench.replay.ingest"] if ingest.is_file() else None,
                f"{ingest.relative_to(root)} not found"))
    command = root / "bench" / "replay" / "ingest_command.py"
    out.append(("ingest-command",
                [py, "-m", "bench.replay.ingest_command"] if command.is_file() else None,
                f"{command.relative_to(root)} not found"))
    runs = root / "bench" / "replay" / "ingest_runs.py"
    out.append(("ingest-runs", [py, "-m", "bench.replay.ingest_runs"] if runs.is_file()
                else None, f"{runs.relative_to(root)} not found"))
    for name in ("scale", "rootstore", "tlog"):
        run = root / "bench" / name / "run.py"
        out.append((name, [py, "-m", f"bench.{name}.run"] if run.is_file() else None,
                    f"{run.relative_to(root)} not found"))
    for script in sorted(root.glob("client-libs/*/bench.sh")):
        out.append((f"client-{script.parent.name}", ["bash", str(script)], ""))
    return out


def run_suite(name: str, argv: list[str], timeout: float = SUITE_TIMEOUT) -> int:
    print(f"== bench {name}: {' '.join(argv[1:])}", flush=True)
    t0 = time.monotonic()
    try:
        rc = subprocess.run(argv, cwd=ROOT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"== bench {name}: stopped after {timeout:g} s", flush=True)
        return 1
    print(f"== bench {name}: exit {rc} after {time.monotonic() - t0:.0f} s", flush=True)
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    failed: list[str] = []
    for name, cmd, why in suites():
        if cmd is None:
            print(f"== bench {name}: skipped ({why})", flush=True)
            continue
        if run_suite(name, cmd, LONG_SUITES.get(name, SUITE_TIMEOUT)) != 0:
            failed.append(name)
    print("\n== bench summary: every figure against its goal", flush=True)
    print(summary.render(summary.rows()), flush=True)
    if not recording():  # recording, this run's figures are the recorded ones
        print("\n== bench against the recorded figures (python -m bench.compare)", flush=True)
        compare.main([])
    if failed:
        print(f"bench: failed suites: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
