"""Benchmark: what the Python TLS hook's data-path guard costs per read.

``ConvergeSSLSocket`` checks, at every read, write and send, that converge has answered
(client-libs/python/src/converge/hooks/context.py). This reads ``--records`` records of
``--size`` bytes from a loopback TLS server through a plain ``ssl.SSLSocket`` and through a
``ConvergeSSLSocket`` already checked (the guard's fast path), the two alternating
``--pairs`` times, and prints the process CPU per ``recv`` (client and server threads) and
the ratio of the medians. Small records are the worst case: the guard's cost is per call.
Results: ``bench/results/hook-overhead.json`` (recording) or under ``var/results/``.
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "client-libs" / "python" / "src"))

import trustme  # noqa: E402
from converge.hooks.context import ConvergeSSLSocket  # noqa: E402

from bench.paths import machine, results_path  # noqa: E402


class _Checked(ConvergeSSLSocket):
    """A ConvergeSSLSocket whose check has answered (no notaries here): the guard's fast
    path, as on every read of a trusted connection."""

    converge_verdict: Any = True

    def do_handshake(self, block: bool = False) -> None:
        ssl.SSLSocket.do_handshake(self, block)


def _one(cls: type[ssl.SSLSocket], sctx: ssl.SSLContext, records: int, size: int) -> float:
    lsock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = lsock.accept()
        with sctx.wrap_socket(conn, server_side=True) as s:
            s.recv(1)
            for _ in range(records):
                s.sendall(b"x" * size)

    t = threading.Thread(target=serve)
    t.start()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.sslsocket_class = cls
    with ctx.wrap_socket(socket.create_connection(lsock.getsockname(), timeout=30),
                         server_hostname="127.0.0.1") as s:
        s.sendall(b"g")
        got, cpu0 = 0, time.process_time()
        while got < records * size:
            got += len(s.recv(size))
        cpu = time.process_time() - cpu0
    t.join(30)
    lsock.close()
    return cpu / records * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--out", type=Path,
                    default=results_path("bench/results/hook-overhead.json"))
    a = ap.parse_args(argv)
    if a.records < 1 or a.size < 1 or a.pairs < 1:
        ap.error("--records, --size and --pairs must be positive")
    leaf = trustme.CA().issue_cert("127.0.0.1")
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(sctx)
    plain: list[float] = []
    guarded: list[float] = []
    for _ in range(a.pairs):
        plain.append(_one(ssl.SSLSocket, sctx, a.records, a.size))
        guarded.append(_one(_Checked, sctx, a.records, a.size))
    ratio = statistics.median(guarded) / statistics.median(plain)
    for name, xs in (("ssl.SSLSocket", plain), ("ConvergeSSLSocket, checked", guarded)):
        print(f"{name}: {statistics.median(xs):.2f} us CPU per recv of {a.size} bytes "
              f"({min(xs):.2f}-{max(xs):.2f})")
    print(f"ratio guarded / plain: {ratio:.3f}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({
        "benchmark": "hook-overhead", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(), "records": a.records, "size": a.size, "pairs": a.pairs,
        "us_per_recv": {"plain": plain, "guarded": guarded},
        "ratio_of_medians": ratio}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
