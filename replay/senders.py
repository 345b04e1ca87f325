"""One replay run over several sender processes (``replay run --senders N``).

Why: one sender process needs about 25 us of CPU per request on a 2-core AMD EPYC, about half
of it the kernel's TCP work on the loopback, so at 20,000 requests/s it needs half a core.
When the machine is busy and the scheduler puts it on a core beside another busy process,
it gets half of that core and falls behind its schedule. ``N`` senders each need ``1/N`` of
that, and keep up beside a busy process as long as each gets its share (docs/replay.md has
the figures).

How: sender ``k`` of ``N`` reads the same workload and sends the events whose sequence
number is ``k`` modulo ``N`` (``Replayer.run(share=...)``); its rows keep the run's sequence
numbers. Each sender opens its connections, says it is ready, and waits; the coordinator then
gives every sender the same start time (``time.perf_counter`` is the machine's monotonic
clock, the same in every process), so the schedule is one schedule. Each sender writes its
rows to a part file next to the results; the coordinator concatenates them (rows are in
completion order in any run) and merges the summaries, lateness histograms included. The
connection and in-flight limits are the run's, divided among the senders.

Signals: SIGINT and SIGTERM to the coordinator are passed on; every sender stops sending and
finishes what is in flight, as a single sender does. A sender that dies leaves its part file
(nothing written is lost) and the run ends with an error naming it. A coordinator that dies
(SIGKILL) takes its senders with it: each gets SIGTERM (Linux's parent-death signal), stops
and writes its part file, which stays for the operator to read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from replay.aggregate import RESULT_COLUMNS
from replay.errors import ReplayInputError, ReplayIOError
from replay.pacer import LogHistogram
from replay.runner import START_LEAD, RunConfig, RunSummary

READY_TIMEOUT_S = 60.0  # a sender starts (imports, reads the workload's head, warms) in ~1 s
MAX_SENDERS = 64
STOP_GRACE_S = 5.0  # beyond the request timeout, for a sender asked to stop


def part_path(results: Path, index: int) -> Path:
    return results.with_name(f"{results.name}.sender{index}.part")


def _config_json(config: RunConfig) -> dict[str, Any]:
    d = dataclasses.asdict(config)
    d["notaries"] = list(config.notaries)
    d["pin_sha256"] = None if config.pin_sha256 is None else config.pin_sha256.hex()
    return d


def _config_from_json(d: dict[str, Any]) -> RunConfig:
    d = dict(d)
    d["notaries"] = tuple(d["notaries"])
    if d.get("pin_sha256") is not None:
        d["pin_sha256"] = bytes.fromhex(d["pin_sha256"])
    return RunConfig(**d)


def sender_config(config: RunConfig, senders: int) -> RunConfig:
    """One sender's share of the run's limits (connections and requests in flight)."""
    return dataclasses.replace(
        config, connections=max(1, config.connections // senders),
        warm_connections=min(config.warm_connections,
                             max(1, config.connections // senders)) if
        config.warm_connections else 0,
        max_inflight=max(1, config.max_inflight // senders))


def merge_summaries(parts: list[dict[str, Any]], speed: float) -> RunSummary:
    """One run's summary from its senders' (each with its lateness histogram)."""
    s = RunSummary(speed=speed)
    lateness = LogHistogram()
    for p in parts:
        for name in ("events", "requests", "client_hits", "sent", "completed", "not_sent",
                     "behind"):
            setattr(s, name, getattr(s, name) + int(p[name]))
        for k, v in p["errors"].items():
            s.errors[k] = s.errors.get(k, 0) + int(v)
        for k, v in p["statuses"].items():
            s.statuses[int(k)] = s.statuses.get(int(k), 0) + int(v)
        s.wall_seconds = max(s.wall_seconds, float(p["wall_seconds"]))
        s.stopped_early = s.stopped_early or bool(p["stopped_early"])
        h = LogHistogram()
        h.counts = {int(b): int(c) for b, c in p["lateness"]["counts"].items()}
        h.n, h.total, h.max = (int(p["lateness"]["n"]), float(p["lateness"]["total"]),
                               float(p["lateness"]["max"]))
        lateness.merge(h)
    s.lateness_p50 = lateness.quantile(0.5)
    s.lateness_p99 = lateness.quantile(0.99)
    s.lateness_max = lateness.max
    return s


def _concatenate(parts: list[Path], results: Path) -> None:
    """The results file: one header, then every part's rows (each part's header dropped)."""
    header = ",".join(RESULT_COLUMNS) + "\n"
    try:
        with results.open("w", encoding="utf-8", newline="") as out:
            out.write(header)
            for part in parts:
                with part.open("r", encoding="utf-8", newline="") as fh:
                    first = fh.readline()
                    if first and first != header:
                        raise ReplayIOError(f"{part}: not a results part (header {first!r})")
                    while chunk := fh.read(1 << 20):
                        out.write(chunk)
    except OSError as exc:
        raise ReplayIOError(f"cannot write {results}: {exc}") from exc
    for part in parts:
        part.unlink()


class _Sender:
    def __init__(self, index: int, proc: subprocess.Popen[str], part: Path) -> None:
        self.index = index
        self.proc = proc
        self.part = part
        self.result: dict[str, Any] | None = None

    def line(self, deadline: float) -> str:
        """The sender's next line on stdout ('' at its end), within the deadline."""
        assert self.proc.stdout is not None
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(max(0.0, deadline - time.monotonic())):
                raise ReplayIOError(f"sender {self.index} did not answer in time")
        return self.proc.stdout.readline()


def run_senders(workload: Path, config: RunConfig, results: Path, senders: int,
                strict: bool = False, quiet: bool = False,
                handle_signals: bool = False) -> RunSummary:
    """Replay ``workload`` with ``senders`` processes into ``results`` (and its summary JSON,
    as :func:`replay.runner.replay_file` writes it)."""
    if not 1 <= senders <= MAX_SENDERS:
        raise ReplayInputError(f"senders must be between 1 and {MAX_SENDERS}")
    config.validate()
    from replay.ingest import ErrorLog
    from replay.workload import read_workload

    # the header (and the first row) here, once, rather than in every sender after the start
    next(iter(read_workload(workload, ErrorLog(strict=strict))), None)
    cfg = sender_config(config, senders)
    parts = [part_path(results, k) for k in range(senders)]
    procs: list[_Sender] = []
    forwarded: dict[int, Any] = {}

    def forward(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.proc.send_signal(signal.SIGTERM)

    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            forwarded[sig] = signal.signal(sig, forward)
    try:
        for k in range(senders):
            job = {"index": k, "count": senders, "workload": str(workload),
                   "config": _config_json(cfg), "part": str(parts[k]), "strict": strict,
                   "quiet": quiet, "emit_errors": k == 0, "coordinator": os.getpid()}
            proc = subprocess.Popen(
                [sys.executable, "-m", "replay.senders"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True)
            procs.append(_Sender(k, proc, parts[k]))
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
        deadline = time.monotonic() + READY_TIMEOUT_S
        for p in procs:
            line = p.line(deadline)
            if line.strip() != "ready":
                _collect(p, line)
                raise _failure(p)
        start = time.perf_counter() + START_LEAD
        for p in procs:
            assert p.proc.stdin is not None
            p.proc.stdin.write(f"go {start!r}\n")
            p.proc.stdin.flush()
        _wait_all(procs)
        failed = [p for p in procs if p.result is None or "error" in p.result]
        if failed:
            raise _failure(failed[0])
    finally:
        # a sender still running here (the coordinator failed or was interrupted) is asked
        # to stop first, so that it writes its rows; killed only if it does not
        for p in procs:
            if p.proc.poll() is None:
                p.proc.terminate()
            if p.proc.stdin is not None:  # a sender waiting for 'go' reads the end of it
                with contextlib.suppress(OSError):
                    p.proc.stdin.close()
        grace = time.monotonic() + config.timeout + STOP_GRACE_S
        for p in procs:
            try:
                p.proc.wait(timeout=max(0.0, grace - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.proc.kill()
                p.proc.wait()
            for pipe in (p.proc.stdin, p.proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
        for signum, previous in forwarded.items():
            signal.signal(signum, previous)
    summary = merge_summaries([p.result for p in procs if p.result is not None],
                              config.speed)
    _concatenate(parts, results)
    doc = summary.as_dict()
    doc["senders"] = [sender_figures(p.index, p.result) for p in procs
                      if p.result is not None]
    results.with_name(results.name + ".summary.json").write_text(
        json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return summary


def sender_figures(index: int, result: dict[str, Any]) -> dict[str, Any]:
    """What the summary file says of one sender: its share, lateness and CPU."""
    return {"index": index, "sent": result["sent"], "lateness_p99": result["lateness_p99"],
            "lateness_max": result["lateness_max"], "cpu_seconds": result["cpu_seconds"]}


def _wait_all(procs: list[_Sender]) -> None:
    """Wait for every sender. When one ends without a result (killed) or with an error, the
    others are told to stop (SIGTERM: they finish what is in flight and write their rows)."""
    running = list(procs)
    stopped = False
    while running:
        for p in list(running):
            if p.proc.poll() is None:
                continue
            running.remove(p)
            _collect(p, "")
            if not stopped and (p.result is None or "error" in p.result):
                stopped = True
                for other in running:
                    with contextlib.suppress(ProcessLookupError):
                        other.proc.send_signal(signal.SIGTERM)
        if running:
            time.sleep(0.02)


def _collect(p: _Sender, first: str) -> None:
    """Read the sender's last line (its result JSON) and wait for it to end."""
    assert p.proc.stdout is not None
    text = first + p.proc.stdout.read()
    p.proc.wait()
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                p.result = json.loads(line)
            break


def _failure(p: _Sender) -> Exception:
    if p.result is not None and "error" in p.result:
        kind = ReplayInputError if p.result.get("kind") == "input" else ReplayIOError
        return kind(f"sender {p.index}: {p.result['error']}")
    return ReplayIOError(f"sender {p.index} ended (exit status {p.proc.returncode}) "
                         f"without a result; its rows so far are in {p.part}")


# -- the sender process ----------------------------------------------------------------------

def _histogram_json(h: LogHistogram) -> dict[str, Any]:
    return {"counts": {str(b): c for b, c in h.counts.items()}, "n": h.n, "total": h.total,
            "max": h.max}


async def _sender(job: dict[str, Any], out: TextIO) -> dict[str, Any]:
    import asyncio

    from replay.ingest import ErrorLog, stderr_emit
    from replay.runner import Replayer, ResultWriter, open_results, stop_on_signals
    from replay.workload import read_workload

    index, count = int(job["index"]), int(job["count"])
    config = _config_from_json(job["config"])
    prefix = f"sender {index + 1}/{count}: "
    log: Callable[[str], None] = ((lambda m: None) if job["quiet"] else
                                  (lambda m: print(prefix + m, file=sys.stderr, flush=True)))
    errors = ErrorLog(strict=bool(job["strict"]),
                      emit=stderr_emit if job["emit_errors"] else None)
    loop = asyncio.get_running_loop()

    async def gate() -> float:
        out.write("ready\n")
        out.flush()
        line = await loop.run_in_executor(None, sys.stdin.readline)
        word, _, value = line.partition(" ")
        if word != "go":
            raise ReplayIOError("the coordinator went away before the start")
        return float(value)

    with open_results(Path(job["part"])) as fh:
        replayer = Replayer(config, ResultWriter(fh), log)
        stop_on_signals(replayer)
        cpu0 = time.process_time()
        summary = await replayer.run(read_workload(Path(job["workload"]), errors),
                                     share=(index, count), gate=gate)
        cpu = time.process_time() - cpu0
    d = summary.as_dict()
    d["lateness"] = _histogram_json(replayer.monitor.lateness)
    d["cpu_seconds"] = cpu
    return d


def _stop_with_coordinator(coordinator: int) -> None:
    """SIGTERM this sender when the coordinator dies (Linux's parent-death signal): it stops
    sending and writes its part file, as when the coordinator passes a signal on."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != coordinator:  # it died before the call: nobody would send the signal
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> int:
    """A sender: its job (JSON) on stdin's first line, 'ready' on stdout, 'go START' on
    stdin, then its result (JSON) as stdout's last line."""
    from replay.cli.common import run_async

    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else reaches the coordinator's pipe
    try:
        job = json.loads(sys.stdin.readline())
        _stop_with_coordinator(int(job["coordinator"]))
        result = run_async(_sender(job, out))
    except ReplayInputError as exc:
        result = {"error": str(exc), "kind": "input"}
    except (ReplayIOError, OSError, ValueError, KeyError) as exc:
        result = {"error": str(exc), "kind": "io"}
    out.write(json.dumps(result) + "\n")
    out.flush()
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
