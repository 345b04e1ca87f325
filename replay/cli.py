"""``replay``: the command line. Subcommands: reproduce, synth, farm, workload, run, report,
rootstore.

Exit codes: 0 success, 1 an IO step failed, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import datetime as dt
import json
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from notary.errors import BadInput, NotaryError
from replay.errors import ReplayInputError, ReplayIOError
from replay.flows import CANONICAL_COLUMNS, FlowRecord, format_canonical, utc_offset_zone
from replay.ingest import ErrorLog, stderr_emit

LEGACY_HEADER = [
    "ts", "te", "td", "sa", "da", "sp", "dp", "pr", "flg", "fwd", "stos", "ipkt", "ibyt", "opkt",
    "obyt", "in", "out", "sas", "das", "smk", "dmk", "dtos", "dir", "nh", "nhb", "svln", "dvln",
    "ismc", "odmc", "idmc", "osmc", "mpls1", "mpls2", "mpls3", "mpls4", "mpls5", "mpls6",
    "mpls7", "mpls8", "mpls9", "mpls10", "cl", "sl", "al", "ra", "eng", "exid", "tr",
]
NEW_HEADER = ["firstSeen", "duration", "proto", "srcAddr", "srcPort", "dstAddr", "dstPort",
              "packets", "bytes", "flows"]
FLOW_FORMATS = ("canonical", "nfdump-legacy", "nfdump-new")
T = TypeVar("T")


def _stamp(t: float, ms: bool) -> str:
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S") + (f".{d.microsecond // 1000:03d}" if ms else "")


def nfdump_legacy_row(r: FlowRecord) -> list[str]:
    """A row in nfdump <= 1.7.4 ``-o csv`` layout (48 columns, second-resolution times)."""
    row = ["0"] * len(LEGACY_HEADER)
    row[0], row[1] = _stamp(r.start, False), _stamp(r.end, False)
    row[2] = f"{r.end - r.start:.3f}"
    row[3], row[4], row[5], row[6] = r.src, r.dst, str(r.sport), str(r.dport)
    row[7] = {6: "TCP", 17: "UDP"}.get(r.proto, str(r.proto))
    row[8] = "...AP.SF"
    row[11], row[12] = str(r.packets), str(r.bytes)
    return row


def nfdump_new_row(r: FlowRecord) -> list[str]:
    """A row in nfdump >= 1.7.5 ``-o csv`` layout."""
    return [_stamp(r.start, True), f"{r.end - r.start:.3f}", str(r.proto), r.src, str(r.sport),
            r.dst, str(r.dport), str(r.packets), str(r.bytes), "1"]


# -- synth ---------------------------------------------------------------------------------
def write_synthetic(trace: Any, out: Path, formats: Sequence[str]) -> dict[str, Any]:
    """Write a synthetic trace's flow files, name map, farm spec and ``synth.json``."""
    cfg = trace.config
    for f in formats:
        if f not in FLOW_FORMATS:
            raise ReplayInputError(f"unknown flow format {f!r}; choose from {FLOW_FORMATS}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "names.txt").open("w", encoding="utf-8") as fh:
        fh.write("# address name (synthetic reverse-DNS map)\n")
        for addr, host in trace.name_map():
            fh.write(f"{addr} {host}\n")
    (out / "farm-spec.json").write_text(json.dumps(trace.farm_spec()) + "\n", encoding="utf-8")
    files = {"canonical": out / "flows.csv", "nfdump-legacy": out / "flows-nfdump-legacy.csv",
             "nfdump-new": out / "flows-nfdump-new.csv"}
    with contextlib.ExitStack() as stack:
        writers: list[tuple[Any, Callable[[FlowRecord], list[str]]]] = []
        for f in formats:
            fh = stack.enter_context(files[f].open("w", encoding="utf-8", newline=""))
            w = csv.writer(fh, lineterminator="\n")
            if f == "canonical":
                w.writerow(CANONICAL_COLUMNS)
                writers.append((w, format_canonical))
            elif f == "nfdump-legacy":
                w.writerow(LEGACY_HEADER)
                writers.append((w, nfdump_legacy_row))
            else:
                w.writerow(NEW_HEADER)
                writers.append((w, nfdump_new_row))
        for rec in trace.flows():
            for w, fmt in writers:
                w.writerow(fmt(rec))
    s = trace.summary
    info = {"config": {k: v for k, v in cfg.__dict__.items()},
            "summary": s.as_dict(),
            "peak_named_flows_per_s": max(s.per_second_named, default=0),
            "mean_named_flows_per_s": s.named_flows / cfg.duration,
            "files": {f: str(files[f]) for f in formats}}
    (out / "synth.json").write_text(json.dumps(info, indent=2, default=str) + "\n",
                                    encoding="utf-8")
    return info


def cmd_synth(a: argparse.Namespace) -> int:
    from replay.synth import SynthConfig, SyntheticTrace

    formats = [f.strip() for f in a.formats.split(",") if f.strip()]
    cfg = SynthConfig(seed=a.seed, scale=a.scale, duration=a.duration,
                      unnamed_share=a.unnamed_share, dead_visit_share=a.dead_share,
                      mitm_share=a.mitm_share, slow_share=a.slow_share,
                      rotating_share=a.rotating_share, min_role_sites=a.min_role_sites,
                      special_visits=a.special_visits)
    trace = SyntheticTrace(cfg)
    write_synthetic(trace, a.out, formats)
    s = trace.summary
    print(f"wrote {s.flows} flows ({s.named_flows} to named sites) to {a.out}", file=sys.stderr)
    return 0


# -- farm ----------------------------------------------------------------------------------
def cmd_farm(a: argparse.Namespace) -> int:
    from replay.farm import FarmPorts, FarmServer, prepare

    ports = FarmPorts(a.port, a.slow_port, a.dead_port, a.silent_port)
    info = prepare(a.spec, a.state, ports, dt.datetime.now(dt.UTC), a.silent_share)
    print(f"farm prepared: {info['sites']} sites, {info['certificates_made']} new "
          f"certificates; hosts file {info['hosts_file']}; targets {info['targets']}",
          file=sys.stderr)
    if a.print_hosts:
        sys.stdout.write((a.state / "hosts").read_text(encoding="utf-8"))
        sys.stdout.flush()
    if a.prepare_only:
        return 0

    async def serve() -> None:
        server = FarmServer(a.state, ports, slow_delay=a.slow_delay,
                            rotate_period=a.rotate_period)
        await server.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"farm serving on {ports.host}:{ports.main} (slow {ports.slow}, dead "
              f"{ports.dead}, silent {ports.silent})", file=sys.stderr, flush=True)
        (a.state / "ready").write_text("ready\n", encoding="utf-8")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), a.duration)
        await server.stop()
        st = server.stats
        print(f"farm stopped: {st.accepted} connections, handshakes {dict(st.handshakes)}, "
              f"failed {st.failed}", file=sys.stderr)

    _run_async(serve())
    return 0


# -- workload ------------------------------------------------------------------------------
def _int_set(text: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ReplayInputError(f"expected comma-separated integers, got {text!r}") from None


def cmd_workload(a: argparse.Namespace) -> int:
    import os

    jobs = a.jobs or os.cpu_count() or 1
    if jobs < 1:
        raise ReplayInputError("--jobs must be at least 1")
    # the engine's thread pool is sized when it is first imported in this process
    os.environ.setdefault("POLARS_MAX_THREADS", str(jobs))
    from replay import columnar
    from replay.pipeline import FlowFilter
    from replay.workload import read_name_map, read_targets, write_stages

    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    tz = utc_offset_zone(a.tz_offset)
    name_map = read_name_map(a.names, errors) if a.names else {}
    targets = read_targets(a.targets) if a.targets else {}
    flt = FlowFilter(_int_set(a.protocols), _int_set(a.ports))
    rdns = None
    if a.rdns:
        from replay.rdns import load_cache, resolve_many, save_cache

        cache_path = a.rdns_cache or a.output.with_suffix(".rdns.csv")

        def rdns(addresses: list[str]) -> dict[str, str | None]:
            cache = load_cache(cache_path)
            _run_async(resolve_many(addresses, cache, a.rdns_concurrency, a.rdns_timeout,
                                    a.rdns_max))
            save_cache(cache_path, cache)
            return cache

    config = columnar.EngineConfig(flow_filter=flt, client_cache_lifetime=a.client_cache_lifetime,
                                   salt=a.salt.encode(), include_client_hits=not a.no_client_hits,
                                   jobs=jobs)
    counters, rows = columnar.build(
        a.inputs, a.output, config, errors, name_map, targets, rdns, a.format, a.nfdump_output,
        tz, a.nfdump_filter, emit=None if a.quiet else stderr_emit)
    stages = a.stages or a.output.with_name(a.output.name + ".stages.json")
    write_stages(counters, stages, {"malformed_examples": errors.messages[:20],
                                    "inputs": [str(p) for p in columnar.expand_inputs(a.inputs)],
                                    "engine": "columnar (polars)", "jobs": jobs})
    c = counters
    print(f"flows read {c.flows_read}, malformed {c.malformed}, paired {c.paired}, filtered "
          f"out {c.filtered_out}, kept {c.kept}, named {c.named}, unnamed dropped "
          f"{c.unnamed_dropped}, client-cache hits {c.client_cache_hits}, notary requests "
          f"{c.notary_requests}; {rows} workload rows -> {a.output}; stages -> {stages}",
          file=sys.stderr)
    return 0


# -- run -----------------------------------------------------------------------------------
def cmd_run(a: argparse.Namespace) -> int:
    from replay.runner import RunConfig, replay_file, tls_pin_from_cert, tls_pin_from_server
    from replay.workload import read_workload

    pin: bytes | None = None
    if a.pin_cert:
        pin = tls_pin_from_cert(a.pin_cert.read_bytes())
    elif a.pin_sha1:
        pin = tls_pin_from_server(a.notary[0], a.pin_sha1)
    cfg = RunConfig(notaries=tuple(a.notary), speed=a.speed, timeout=a.timeout,
                    max_inflight=a.max_inflight, connections=a.connections, route=a.route,
                    insecure=a.insecure, pin_sha256=pin, spin=a.spin_ms / 1000,
                    limit=a.limit, max_duration=a.max_duration,
                    progress_interval=0 if a.quiet else a.progress_interval)
    cfg.validate()
    log = (lambda m: None) if a.quiet else None
    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    summary = _run_async(replay_file(read_workload(a.workload, errors), cfg, a.output, log,
                                     handle_signals=True))
    print(json.dumps(summary.as_dict()), file=sys.stderr)
    return 0


# -- report --------------------------------------------------------------------------------
def cmd_report(a: argparse.Namespace) -> int:
    from replay.report import build_report
    from replay.workload import read_stages

    stages = read_stages(a.stages) if a.stages else None
    synth = None
    if a.inputs:
        try:
            synth = json.loads(a.inputs.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReplayInputError(f"cannot read {a.inputs}: {exc}") from exc
    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    summary = build_report(a.results, a.output, stages, plots=not a.no_plots, errors=errors,
                           synth=synth)
    print(summary["text"])
    print(f"\nreport written to {a.output / 'report.md'} ({summary['requests']} requests, "
          f"{summary['client_hits']} client hits)", file=sys.stderr)
    return 0


# -- reproduce -----------------------------------------------------------------------------
def cmd_reproduce(a: argparse.Namespace) -> int:
    from replay.reproduce import WORLD_MODELS, ReproduceConfig, reproduce

    worlds = tuple(m.strip() for m in a.worlds.split(",") if m.strip()) if a.worlds else ()
    cfg = ReproduceConfig(out=a.out, scale=a.scale, duration=a.duration, speed=a.speed,
                          seed=a.seed, world_sites=a.world_sites,
                          worlds=worlds if a.worlds is not None else WORLD_MODELS,
                          client_bench=not a.no_client_cost)
    return reproduce(cfg)


def _run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed (chosen only here, the entry point)."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


DESCRIPTION = (
    "Turn NetFlow traces into notary validation workloads, replay them open loop against "
    "notaries, and report the tables and figures of the 2014 Forced Perspectives study. "
    "Subcommands: reproduce (everything below in one command), synth, farm, workload, run, "
    "report, rootstore (the 2015 thesis's restricted-root-store study). Exit codes: "
    "0 success, 1 an IO step failed, 2 bad input or usage, 130 interrupted."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="replay", description=DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)

    x = sub.add_parser("reproduce", help="the whole reproduction: every table side by side",
                       description="synth -> farm -> notary -> workload -> run -> report, "
                       "the restricted-root-store comparison and worlds, and the client cost; "
                       "prints every table of the study and the thesis beside ours.")
    x.add_argument("--out", type=Path, required=True, help="output directory (required)")
    x.add_argument("--scale", type=float, default=0.02,
                   help="size of the synthetic trace, 1.0 = the study's hour "
                   "(default: %(default)s)")
    x.add_argument("--duration", type=float, default=600.0,
                   help="seconds of trace (default: %(default)s)")
    x.add_argument("--speed", type=float, default=2.0,
                   help="replay speed factor (default: %(default)s)")
    x.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    x.add_argument("--world-sites", type=int, default=1500,
                   help="sites per root-store world (default: %(default)s)")
    x.add_argument("--worlds", default=None,
                   help="root popularity models of the worlds, comma-separated "
                   "(default: thesis,zipf:0.8,zipf:1.2,uniform; empty: none)")
    x.add_argument("--no-client-cost", action="store_true",
                   help="skip the client-cost benchmark of Table 4 (default: run it)")
    x.set_defaults(func=cmd_reproduce)

    s = sub.add_parser("synth", help="generate a synthetic university hour of flows",
                       description="Generate flows shaped like the study's university hour, "
                       "the name map and the farm's site list.")
    s.add_argument("--out", type=Path, required=True, help="output directory (required)")
    s.add_argument("--scale", type=float, default=1.0,
                   help="multiplies rates, clients and catalogue sizes; 1.0 is the study's "
                   "~3.9 M flows per hour (default: %(default)s)")
    s.add_argument("--duration", type=float, default=3600.0,
                   help="trace length in seconds (default: %(default)s)")
    s.add_argument("--seed", type=int, default=1,
                   help="random seed; the same seed gives the same trace (default: %(default)s)")
    s.add_argument("--formats", default="canonical,nfdump-legacy",
                   help="flow files to write, comma-separated from canonical, nfdump-legacy, "
                   "nfdump-new (default: %(default)s)")
    s.add_argument("--unnamed-share", type=float, default=0.46,
                   help="share of flows whose destination has no name (dropped as in the "
                   "study) (default: %(default)s)")
    s.add_argument("--dead-share", type=float, default=0.16,
                   help="share of visits to dead sites; the default gives about 20%% 503s "
                   "(default: %(default)s)")
    s.add_argument("--mitm-share", type=float, default=0.005,
                   help="share of sites the client saw through a forged certificate "
                   "(default: %(default)s)")
    s.add_argument("--slow-share", type=float, default=0.01,
                   help="share of live sites with a delayed handshake (default: %(default)s)")
    s.add_argument("--rotating-share", type=float, default=0.01,
                   help="share of live sites whose certificate changes periodically "
                   "(default: %(default)s)")
    s.add_argument("--min-role-sites", type=int, default=1,
                   help="at least this many slow, rotating and mitm sites each "
                   "(default: %(default)s)")
    s.add_argument("--special-visits", type=int, default=1,
                   help="guaranteed visits to each slow/rotating/mitm site "
                   "(default: %(default)s)")
    s.set_defaults(func=cmd_synth)

    f = sub.add_parser("farm", help="serve the synthetic sites over TLS on loopback",
                       description="Make certificates for the synthetic sites and serve them "
                       "over real TLS on 127.0.0.1 until stopped.")
    f.add_argument("--spec", type=Path, required=True,
                   help="farm-spec.json from replay synth (required)")
    f.add_argument("--state", type=Path, required=True,
                   help="directory for the PKI, targets.csv, hosts and farm.json (required)")
    f.add_argument("--port", type=int, default=18443,
                   help="TLS port of good, rotating and mitm sites (default: %(default)s)")
    f.add_argument("--slow-port", type=int, default=18444,
                   help="port of slow sites (default: %(default)s)")
    f.add_argument("--dead-port", type=int, default=18445,
                   help="port bound but not listening: refused connections "
                   "(default: %(default)s)")
    f.add_argument("--silent-port", type=int, default=18446,
                   help="port that accepts and never answers (default: %(default)s)")
    f.add_argument("--silent-share", type=float, default=0.5,
                   help="share of dead sites that accept and never answer (probe timeouts) "
                   "(default: %(default)s)")
    f.add_argument("--slow-delay", type=float, default=1.0,
                   help="seconds a slow site waits before its handshake (default: %(default)s)")
    f.add_argument("--rotate-period", type=float, default=30.0,
                   help="seconds between certificate changes of rotating sites "
                   "(default: %(default)s)")
    f.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: until SIGINT/SIGTERM)")
    f.add_argument("--prepare-only", action="store_true",
                   help="make certificates and files, then exit without serving")
    f.add_argument("--print-hosts", action="store_true",
                   help="also print the hosts file's contents (default: only its path)")
    f.set_defaults(func=cmd_farm)

    w = sub.add_parser("workload", help="turn flow files into a workload file",
                       description="Filter, name and client-cache flows into a workload of "
                       "timed validation requests (docs/replay.md).")
    w.add_argument("inputs", type=Path, nargs="+",
                   help="flow files: nfdump captures (a directory or a glob of nfcapd.* files "
                   "is one trace, in time order), nfdump CSV or canonical CSV")
    w.add_argument("-o", "--output", type=Path, required=True,
                   help="workload file to write: CSV, or Parquet when it ends in .parquet "
                   "(required)")
    w.add_argument("--jobs", type=int, default=0,
                   help="cores to use (default: all of them)")
    w.add_argument("-q", "--quiet", action="store_true",
                   help="no progress lines (default: flows read, flows/s and time to go)")
    w.add_argument("--names", type=Path, help="address-to-name map (default: none)")
    w.add_argument("--targets", type=Path,
                   help="farm targets.csv (port, fingerprint) (default: none)")
    w.add_argument("--format", choices=("auto", "nfdump", "csv"), default="auto",
                   help="input format (default: %(default)s, from the file's content)")
    w.add_argument("--nfdump-output", choices=("fmt", "csv"), default="fmt",
                   help="how nfdump prints capture files (default: %(default)s)")
    w.add_argument("--nfdump-filter", default=None,
                   help="filter expression passed to nfdump (default: none)")
    w.add_argument("--ports", default="443",
                   help="destination ports kept, comma-separated (default: %(default)s)")
    w.add_argument("--protocols", default="6",
                   help="IP protocol numbers kept, comma-separated (default: %(default)s, TCP)")
    w.add_argument("--client-cache-lifetime", type=float, default=None,
                   help="seconds a client keeps a validated site (default: the whole trace, "
                   "as the study)")
    w.add_argument("--no-client-hits", action="store_true",
                   help="leave client-cache hits out of the file (default: keep them)")
    w.add_argument("--tz-offset", type=float, default=0.0,
                   help="hours east of UTC for naive timestamps in CSV inputs "
                   "(default: %(default)s)")
    w.add_argument("--salt", default="converge-replay",
                   help="key of the BLAKE2b that anonymises client addresses "
                   "(default: %(default)s)")
    w.add_argument("--strict", action="store_true",
                   help="stop at the first malformed row (default: count and skip)")
    w.add_argument("--stages", type=Path,
                   help="stage counts JSON to write (default: OUTPUT.stages.json)")
    w.add_argument("--rdns", action="store_true",
                   help="reverse-DNS destinations that SNI and the map did not name "
                   "(default: off)")
    w.add_argument("--rdns-cache", type=Path,
                   help="reverse-DNS cache CSV (default: the output path with suffix .rdns.csv)")
    w.add_argument("--rdns-concurrency", type=int, default=64,
                   help="reverse lookups in flight (default: %(default)s)")
    w.add_argument("--rdns-timeout", type=float, default=2.0,
                   help="seconds per reverse lookup (default: %(default)s)")
    w.add_argument("--rdns-max", type=int, default=100_000,
                   help="distinct addresses looked up at most (default: %(default)s)")
    w.set_defaults(func=cmd_workload)

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
    r.add_argument("--route", choices=("round-robin", "client-hash"), default="round-robin",
                   help="how requests are spread over several notaries (default: %(default)s)")
    r.add_argument("--insecure", action="store_true",
                   help="do not verify HTTPS notaries (benchmarks only; default: verify)")
    r.add_argument("--pin-cert", type=Path,
                   help="pin this PEM certificate's SHA-256 (default: the system store)")
    r.add_argument("--pin-sha1",
                   help="pin the notary certificate with this published SHA-1 "
                   "(default: the system store)")
    r.add_argument("--spin-ms", type=float, default=1.0,
                   help="yield-wait this long before each send instead of a timer, for "
                   "precision (default: %(default)s)")
    r.add_argument("--limit", type=int, help="send at most this many events (default: all)")
    r.add_argument("--max-duration", type=float,
                   help="stop after this many seconds (default: the whole workload)")
    r.add_argument("--progress-interval", type=float, default=1.0,
                   help="seconds between progress lines (default: %(default)s)")
    r.add_argument("--quiet", action="store_true", help="no progress lines (default: print)")
    r.add_argument("--strict", action="store_true",
                   help="stop at the first malformed workload row (default: count and skip)")
    r.set_defaults(func=cmd_run)

    o = sub.add_parser("report", help="tables and figures from a results file",
                       description="The study's tables and plots from a results file.")
    o.add_argument("results", type=Path, help="results CSV from replay run")
    o.add_argument("-o", "--output", type=Path, required=True,
                   help="directory for the report (required)")
    o.add_argument("--stages", type=Path,
                   help="stage counts from replay workload, for the flow table (default: none)")
    o.add_argument("--inputs", type=Path,
                   help="synth.json of a synthetic trace: lists its inputs and marks the rows "
                   "they decide (default: none, every row measured)")
    o.add_argument("--no-plots", action="store_true", help="tables only (default: with PNGs)")
    o.add_argument("--strict", action="store_true",
                   help="stop at the first malformed results row (default: count and skip)")
    o.set_defaults(func=cmd_report)

    from replay.rootstore.cli import add_parser as add_rootstore

    add_rootstore(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ReplayInputError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return 2
    except BadInput as exc:  # the notary's own checks, where the study uses it as a library
        print(f"replay: error: {exc.message}", file=sys.stderr)
        return 2
    except NotaryError as exc:
        print(f"replay: failed: {exc.message}", file=sys.stderr)
        return 1
    except ReplayIOError as exc:
        print(f"replay: failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"replay: failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
