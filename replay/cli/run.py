"""``replay run``: replay a workload against notaries (open loop)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from replay.cli.common import run_async
from replay.ingest import ErrorLog, stderr_emit


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("run", help="replay a workload against notaries (open loop)",
                       description="Send every request of a workload at its scheduled time, "
                       "whatever earlier responses do, and record what happened.")
    r.add_argument("workload", type=Path, help="workload CSV from replay workload")
    r.add_argument("--notary", action="append", required=True,
                   help="notary base URL, repeatable (required)")
    r.add_argument("-o", "--output", type=Path, required=True,
                   help="results CSV to write (required)")
    r.add_argument("--speed", type=float, default=1.0,
                   help="schedule compression: 2 sends twice as fast (default: %(default)s)")
    r.add_argument("--timeout", type=float, default=10.0,
                   help="seconds per request (default: %(default)s)")
    r.add_argument("--max-inflight", type=int, default=20_000,
                   help="requests in flight; beyond, a request is recorded as not sent "
                   "(default: %(default)s)")
    r.add_argument("--connections", type=int, default=512,
                   help="keep-alive connections per notary (default: %(default)s)")
    r.add_argument("--warm-connections", type=int, default=32,
                   help="connections opened to each notary before the schedule starts, so "
                   "that its first requests do not wait for connects (at most --connections; "
                   "default: %(default)s)")
    r.add_argument("--route", choices=("round-robin", "client-hash"), default="round-robin",
                   help="how requests are spread over several notaries (default: %(default)s)")
    r.add_argument("--insecure", action="store_true",
                   help="do not verify HTTPS notaries (benchmarks only; default: verify)")
    r.add_argument("--pin-cert", type=Path,
                   help="pin this PEM certificate's SHA-256 (default: the system store)")
    r.add_argument("--pin-sha1",
                   help="pin the notary certificate with this published SHA-1 "
                   "(default: the system store)")
    r.add_argument("--spin-ms", type=float, default=0.0,
                   help="busy-wait this long before each send instead of a timer: sends "
                   "within microseconds of their time at the cost of a whole core (default: "
                   "%(default)s, timers only: up to about 1 ms late)")
    r.add_argument("--limit", type=int, help="send at most this many events (default: all)")
    r.add_argument("--max-duration", type=float,
                   help="stop after this many seconds (default: the whole workload)")
    r.add_argument("--progress-interval", type=float, default=1.0,
                   help="seconds between progress lines (default: %(default)s)")
    r.add_argument("--quiet", action="store_true", help="no progress lines (default: print)")
    r.add_argument("--senders", type=int, default=1,
                   help="sender processes sharing the schedule, each sending every N-th "
                   "request (connection and in-flight limits are divided among them); 2 or "
                   "more above about 10,000 requests/s, so that a busy core does not hold the "
                   "schedule back (default: %(default)s)")
    r.add_argument("--strict", action="store_true",
                   help="stop at the first malformed workload row (default: count and skip)")
    r.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from replay.runner import RunConfig, replay_file, tls_pin_from_cert, tls_pin_from_server
    from replay.workload import read_workload

    pin: bytes | None = None
    if a.pin_cert:
        pin = tls_pin_from_cert(a.pin_cert.read_bytes())
    elif a.pin_sha1:
        pin = tls_pin_from_server(a.notary[0], a.pin_sha1)
    cfg = RunConfig(notaries=tuple(a.notary), speed=a.speed, timeout=a.timeout,
                    max_inflight=a.max_inflight, connections=a.connections,
                    warm_connections=a.warm_connections, route=a.route,
                    insecure=a.insecure, pin_sha256=pin, spin=a.spin_ms / 1000,
                    limit=a.limit, max_duration=a.max_duration,
                    progress_interval=0 if a.quiet else a.progress_interval)
    cfg.validate()
    if a.senders != 1:
        from replay.senders import run_senders

        summary = run_senders(a.workload, cfg, a.output, a.senders, strict=a.strict,
                              quiet=a.quiet, handle_signals=True)
        print(json.dumps(summary.as_dict()), file=sys.stderr)
        return 0
    log = (lambda m: None) if a.quiet else None
    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    summary = run_async(replay_file(read_workload(a.workload, errors), cfg, a.output, log,
                                     handle_signals=True))
    print(json.dumps(summary.as_dict()), file=sys.stderr)
    return 0
