"""``replay farm``: serve the synthetic sites over TLS on loopback."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import signal
import sys
from pathlib import Path

from replay.cli.common import run_async


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    f.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
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

    run_async(serve())
    return 0
