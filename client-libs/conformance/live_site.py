"""A real notary and a real HTTPS site on loopback, for the install tests of the client
libraries (an application built against an installed copy of a library must fetch a page the
notary confirms, and be refused when no notary answers).

    python live_site.py --trusted 'CMD {config} {host} {port}' --refused 'CMD {config} ...'

starts ``notary serve`` (``--allow-target 127.0.0.0/8``) and a threaded HTTPS server on
127.0.0.1 whose page says ``page fetched``, writes two configuration directories (``good``:
that notary; ``dead``: a notary bundle at a port where nothing listens) and runs each command
with ``{config}``, ``{host}`` and ``{port}`` filled in. ``--trusted`` commands must exit 0
and print the page; ``--refused`` ones must exit non-zero without it. Exit 0 when all do.
"""

from __future__ import annotations

import argparse
import http.server
import json
import shlex
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parents[2]
NOTARY = ROOT / ".venv" / "bin" / "notary"
PAGE = b"page fetched through converge"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that refuses the certificate aborts its handshake: expected here


def _site(tmp: Path) -> tuple[http.server.ThreadingHTTPServer, int]:
    ca = trustme.CA()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    srv = _Server(("127.0.0.1", 0), _Page)
    # the handshake in the handler's thread: the notary probes the site while a client's
    # handshake waits for the notary's answer
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, int(srv.server_address[1])


def _config(tmp: Path, name: str, notary_dir: Path, port: int) -> Path:
    d = tmp / name
    (d / "notaries-available").mkdir(parents=True)
    (d / "notaries-enabled").mkdir()
    subprocess.run([str(NOTARY), "bundle", "--data-dir", str(notary_dir), "--host", "127.0.0.1",
                    "--ssl-port", str(port), "--name", "Org Live", "-o",
                    str(d / "notaries-available" / "live.notary")], check=True,
                   capture_output=True, timeout=60)
    (d / "notaries-enabled" / "live.notary").symlink_to(Path("../notaries-available/live.notary"))
    (d / "converge.config").write_text(json.dumps(
        {"db": None, "connect-timeout": 2, "notary-timeout": 3, "total-timeout": 5}))
    return d


def _wait_tcp(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"notary exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the notary did not start")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trusted", action="append", default=[], help="must fetch the page")
    ap.add_argument("--refused", action="append", default=[], help="must be refused")
    args = ap.parse_args(argv)
    if not NOTARY.exists():
        print(f"live_site: {NOTARY} is missing (make setup)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        srv, site_port = _site(tmp)
        notary_port = _free_port()
        log = (tmp / "notary.log").open("wb")
        proc = subprocess.Popen([str(NOTARY), "serve", "--data-dir", str(tmp / "n"), "--listen",
                                 f"127.0.0.1:{notary_port}", "--allow-target", "127.0.0.0/8"],
                                stdout=log, stderr=subprocess.STDOUT)
        failures = 0
        try:
            _wait_tcp(notary_port, proc, time.monotonic() + 30)
            configs = {"good": _config(tmp, "good", tmp / "n", notary_port),
                       "dead": _config(tmp, "dead", tmp / "n", _free_port())}
            for want, commands, config in (("trusted", args.trusted, configs["good"]),
                                           ("refused", args.refused, configs["dead"])):
                for template in commands:
                    cmd = [part.format(config=config, host="127.0.0.1", port=site_port)
                           for part in shlex.split(template)]
                    r = subprocess.run(cmd, capture_output=True, timeout=120)
                    fetched = r.returncode == 0 and PAGE in r.stdout
                    refused = r.returncode != 0 and PAGE not in r.stdout
                    ok = fetched if want == "trusted" else refused
                    print(f"{'ok' if ok else 'FAIL'} {want}: {' '.join(cmd[:2])} ... exit "
                          f"{r.returncode}")
                    if not ok:
                        failures += 1
                        sys.stdout.write(r.stdout.decode(errors="replace")[-1500:])
                        sys.stdout.write(r.stderr.decode(errors="replace")[-1500:])
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            srv.shutdown()
            log.close()
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
