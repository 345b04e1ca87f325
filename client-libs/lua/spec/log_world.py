"""A real ``notary serve`` (its transparency log on by default) for the Lua suite's proof
checks, with relays in front of it from client-libs/conformance/log_relays.py (the notary's
own certificate; ``record`` passes the answer through, ``strip`` removes the transparency
member, ``alter`` flips a proof hash) and an HTTPS site with the vectors' other test key.

    python log_world.py

prints one JSON line: {"notaries": [{name, bundle, bundle_extended}], "genuine": FP,
"site": PORT}. The notaries, each the same real notary: ``Org Log`` (direct), ``Org Log
Record``, ``Org Log Stripped``, ``Org Log Stripped No Log`` (its bundle names no log),
``Org Log Altered``, ``Org Log Altered No Log``, ``Org Log Witness`` (its bundle requires the
cosignature of a witness that never cosigned) and ``Org Log Witness Twin`` (the same witness,
none required). Commands on stdin, one JSON line each: ``asked`` (whether each request the
record relay read asked for a proof), ``quit`` (or end of input).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "client-libs" / "conformance"))
from conformance_env import _tls_server as tls_server  # noqa: E402
from log_relays import LogRelay, asks_for_proof, start_log_relay  # noqa: E402

KEYS = ROOT / "client-libs" / "vectors" / "keys"
NOTARY = ROOT / ".venv" / "bin" / "notary"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"notary exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("notary not listening after 30 s")


def absent_witness() -> str:
    """The verifier key of a witness that cosigns nothing."""
    name = "witness.test/absent"
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    kid = hashlib.sha256(name.encode() + b"\n\x04" + raw).digest()[:4]
    key64 = base64.b64encode(bytes([0x04]) + raw).decode()
    return f"{name}+{kid.hex()}+{key64}"


def main() -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        data = tmp / "data"
        port = free_port()
        log = tmp / "notary.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [str(NOTARY), "serve", "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
                 "--allow-target", "127.0.0.0/8", "--probe-timeout", "2", "--log-interval", "0.2"],
                stdout=fh, stderr=subprocess.STDOUT)
        servers: list[socketserver.TCPServer] = []
        try:
            wait_listening(port, proc, log)
            out = subprocess.run(
                [str(NOTARY), "bundle", "--data-dir", str(data), "--host", "127.0.0.1",
                 "--ssl-port", str(port), "--name", "Org Log"],
                capture_output=True, text=True, timeout=60, check=True)
            doc = json.loads(out.stdout)
            site_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            site_ctx.load_cert_chain(str(KEYS / "test-other-cert.pem"),
                                     str(KEYS / "test-other-key.pem"))
            page = b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"
            site = tls_server(("127.0.0.1", 0), site_ctx, lambda s: s.sendall(page))
            servers.append(site)
            relays = {}
            for mode in ("record", "strip", "alter"):
                relay = LogRelay(mode, port)
                servers.append(start_log_relay(relay, data))
                relays[mode] = (relay, servers[-1].server_address[1])
            witness = absent_witness()
            notaries = []

            def add(name: str, p: int, log_member: dict[str, Any] | None) -> None:
                d = {**doc, "name": name, "hosts": [{**doc["hosts"][0], "ssl_port": p}]}
                if log_member is None:
                    d.pop("transparency")
                else:
                    d["transparency"] = log_member
                text = json.dumps(d)
                notaries.append({"name": name, "bundle": text, "bundle_extended": text})

            member = doc["transparency"]
            add("Org Log", port, member)
            add("Org Log Record", relays["record"][1], member)
            add("Org Log Stripped", relays["strip"][1], member)
            add("Org Log Stripped No Log", relays["strip"][1], None)
            add("Org Log Altered", relays["alter"][1], member)
            add("Org Log Altered No Log", relays["alter"][1], None)
            listed = [{"name": witness.split("+")[0], "vkey": witness}]
            with_witness = {**member, "witnesses": listed}
            add("Org Log Witness", port, {**with_witness, "min_cosignatures": 1})
            add("Org Log Witness Twin", port, {**with_witness, "min_cosignatures": 0})
            pem = (KEYS / "test-other-cert.pem").read_bytes()
            der = x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
            genuine = ":".join(f"{b:02X}" for b in hashlib.sha1(der).digest())
            print(json.dumps({"notaries": notaries, "genuine": genuine,
                              "site": site.server_address[1]}), flush=True)
            for line in sys.stdin:
                cmd = line.strip()
                if cmd == "asked":
                    answer: Any = [asks_for_proof(r) for r in relays["record"][0].requests]
                elif cmd == "quit":
                    break
                else:
                    answer = {"error": f"unknown command {cmd}"}
                print(json.dumps(answer), flush=True)
        finally:
            for s in servers:
                s.shutdown()
                s.server_close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


if __name__ == "__main__":
    main()
