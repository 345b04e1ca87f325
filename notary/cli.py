"""``notary``: serve, keygen, bundle, check. ``main(argv) -> int`` is tested in-process."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from cryptography import x509

from notary import __version__, keys
from notary.ca.verify import load_certificate
from notary.config import Settings, load_toml, parse_listen
from notary.core import extended
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.fingerprint import CertDigests, colon_hex
from notary.core.target import Target, normalise_host, parse_ip, parse_port
from notary.errors import BadConfig, BadData, BadInput, NotaryError
from notary.probe import TLSProber
from notary.tlog.note import COSIGNATURE, NoteError, Signer, Verifier, parse_witnesses
from notary.web import build_resolver

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
MAKE_RUN_DATA = Path("var/notary")  # `make run`'s data directory (Makefile DATA)

_SERVE_FLAGS: list[tuple[str, dict[str, Any]]] = [
    ("--data-dir", {"type": Path, "help": "directory for key, certificate and database "
                    "(default ./notary-data)"}),
    ("--listen", {"action": "append", "metavar": "HOST:PORT",
                  "help": "address to serve on (repeatable; default 127.0.0.1:8443)"}),
    ("--db", {"type": Path, "help": "SQLite database (default DATA/notary.sqlite3)"}),
    ("--sqlite-driver", {"choices": ["aiosqlite", "thread"],
                         "help": "how the SQLite store reaches the file: aiosqlite (default) "
                         "or thread (the store's earlier one-thread executor, kept so the "
                         "benchmark can compare the two)"}),
    ("--key", {"type": Path, "help": "RSA key (default DATA/notary.key)"}),
    ("--cert", {"type": Path, "help": "certificate (default DATA/notary.pem)"}),
    ("--signing-key", {"type": Path, "help": "Ed25519 key for the extended format "
                       "(default DATA/signing.key)"}),
    ("--hostname", {"help": "name in a generated certificate (default localhost)"}),
    ("--workers", {"type": int, "help": "worker processes on one port (default 1)"}),
    ("--allow-target", {"action": "append", "metavar": "CIDR",
                        "help": "allow probing this otherwise refused range (repeatable)"}),
    ("--resolve", {"action": "append", "metavar": "NAME=IP",
                   "help": "static name map entry (repeatable)"}),
    ("--hosts-file", {"type": Path, "help": "static name map file: 'IP name...' lines"}),
    ("--probe-timeout", {"type": float, "metavar": "SECONDS",
                         "help": "connect+handshake timeout (default 2)"}),
    ("--max-probes", {"type": int, "help": "concurrent live probes (default 256)"}),
    ("--resolver-threads", {"type": int, "metavar": "N",
                            "help": "system name lookups in progress at once; one client "
                            "address and network hold at most their --client-share and "
                            "--group-share of them (default 16)"}),
    ("--client-share", {"type": float, "metavar": "FRACTION",
                        "help": "largest fraction of the probe slots and of the relay tunnels "
                        "one client address (IPv6: its /64) may hold at once (default 0.25; "
                        "0 turns the per-address share off)"}),
    ("--group-share", {"type": float, "metavar": "FRACTION",
                       "help": "largest fraction of the probe slots one client network (IPv4 "
                       "/24, IPv6 /48) may hold at once (default 0.5; 0 turns it off)"}),
    ("--probe-reserve", {"type": float, "metavar": "FRACTION",
                         "help": "fraction of the probe slots kept for clients with no probe "
                         "in flight (default 0.25; 0 turns it off)"}),
    ("--recheck-after", {"type": int, "metavar": "SECONDS",
                         "help": "re-verify cached fingerprints older than this (default 86400)"}),
    ("--negative-ttl", {"type": float, "metavar": "SECONDS",
                        "help": "remember unreachable targets this long (default 60)"}),
    ("--lru-entries", {"type": int, "help": "in-process cache size (default 100000)"}),
    ("--store-max-records", {"type": int, "metavar": "N", "help": "records about targets "
                             "the notary resolved itself; the least useful are evicted beyond "
                             "(default 1000000; 0: no cap)"}),
    ("--store-max-bytes", {"type": int, "metavar": "BYTES", "help": "accounted bytes of those "
                           "records (default 536870912; 0: no cap)"}),
    ("--named-max-records", {"type": int, "metavar": "N", "help": "records about addresses "
                             "clients named, a budget of their own (default 20000; 0: no cap)"}),
    ("--named-max-bytes", {"type": int, "metavar": "BYTES", "help": "accounted bytes of those "
                           "records and their chains (default 33554432; 0: no cap)"}),
    ("--redis", {"metavar": "URL", "help": "share records through Redis "
                 "(redis://HOST:PORT/DB) instead of the SQLite file"}),
    ("--redis-prefix", {"help": "prefix of every Redis key (default converge:)"}),
    ("--metrics-listen", {"metavar": "HOST:PORT", "help": "serve /metrics, /healthz and "
                          "/readyz on this plain-HTTP address, for all workers together "
                          "(default: off)"}),
    ("--rate-limit", {"type": float, "metavar": "RPS", "help": "requests per second per "
                      "client address, 429 beyond (default 10000; 0 turns it off)"}),
    ("--rate-burst", {"type": int, "metavar": "N", "help": "token-bucket size per client "
                      "address (default 20000)"}),
    ("--max-connections", {"type": int, "metavar": "N", "help": "open connections per "
                           "process before answering 503 (default 10000; 0 turns it off)"}),
    ("--probe-rate-limit", {"type": float, "metavar": "RPS", "help": "live probes per second "
                            "per client address, 429 beyond (default 1000; 0 turns it off)"}),
    ("--probe-rate-burst", {"type": int, "metavar": "N", "help": "probe token-bucket size "
                            "per client address (default 2000)"}),
    ("--relay-listen", {"action": "append", "metavar": "HOST:PORT",
                        "help": "plain-HTTP bounce relay (CONNECT to other notaries' port "
                        "4242 only; repeatable; off by default)"}),
    ("--relay-port", {"type": int, "metavar": "PORT",
                      "help": "the only destination port the relay connects to (default 4242)"}),
    ("--max-tunnels", {"type": int, "metavar": "N",
                       "help": "open relay connections per process (default 256)"}),
    ("--tunnel-idle-timeout", {"type": float, "metavar": "SECONDS",
                               "help": "close a tunnel idle this long (default 60)"}),
    ("--tunnel-max-bytes", {"type": int, "metavar": "BYTES",
                            "help": "bytes per tunnel, both directions (default 16777216)"}),
    ("--relay-rate-limit", {"type": float, "metavar": "RPS",
                            "help": "relay CONNECTs per second per client address, 503 "
                            "beyond (default 20; 0 turns it off)"}),
    ("--relay-rate-burst", {"type": int, "metavar": "N",
                            "help": "relay CONNECT token-bucket size per client address "
                            "(default 200)"}),
    ("--verifier", {"choices": ["perspective", "ca", "both"], "help": "perspective (default; "
                    "legacy answers unchanged), ca or both: see docs/rootstore.md"}),
    ("--ca-roots", {"action": "append", "metavar": "PEM", "help": "more roots for the CA "
                    "verifier, added to Mozilla's (repeatable)"}),
    ("--ca-trust", {"type": Path, "metavar": "FILE", "help": "restrict the CA verifier to "
                    "these root SHA-256 fingerprints (e.g. from replay rootstore topk)"}),
    ("--log-key", {"type": Path, "help": "Ed25519 key of the transparency log "
                   "(default DATA/log.key, made on first run)"}),
    ("--log-origin", {"help": "the log's origin and key name (default "
                      "HOSTNAME/converge-log/<key id>)"}),
    ("--log-witness", {"action": "append", "metavar": "URL=VKEY",
                       "help": "a witness to cosign every checkpoint: its submission prefix "
                       "and verifier key (repeatable; default none)"}),
    ("--trusted-proxy", {"action": "append", "metavar": "CIDR",
                         "help": "a balancer that sends PROXY protocol v2: its connections "
                         "must carry the header and the client address it announces is the "
                         "one limits and shares count; a header from anywhere else is refused "
                         "(repeatable; default none)"}),
    ("--log-interval", {"type": float, "metavar": "SECONDS",
                        "help": "seconds between sequencing batches (default 1)"}),
    ("--log-proof-wait", {"type": float, "metavar": "SECONDS",
                          "help": "how long an answer that asks for a proof waits for its "
                          "entry to be sequenced (default 3)"}),
]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="notary", description="A Convergence notary.")
    p.add_argument("--version", action="version", version=f"notary {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the notary")
    serve.add_argument("--config", type=Path, help="TOML file with the same keys as the flags")
    for flag, kw in _SERVE_FLAGS:
        serve.add_argument(flag, **kw)
    serve.add_argument("--no-tls", action="store_true", help="plain HTTP (behind a proxy)")
    serve.add_argument("--access-log", action="store_true", help="log each request")
    serve.add_argument("--log-client-addresses", action="store_true",
                       help="put client addresses in the access log (off: privacy)")
    serve.add_argument("--ca-no-mozilla", action="store_true",
                       help="the CA verifier trusts only --ca-roots, not Mozilla's store")
    serve.add_argument("--no-log", action="store_true",
                       help="keep no transparency log (default: on, served under /log/)")

    kg = sub.add_parser("keygen", help="create the RSA key and self-signed certificate",
                        description="Create the notary's RSA-2048 key (TLS and legacy "
                        "signatures), its self-signed certificate and the Ed25519 signing key "
                        "of the extended format.")
    kg.add_argument("--data-dir", type=Path, default=Path("notary-data"),
                    help="directory for the key files (default: %(default)s)")
    kg.add_argument("--key", type=Path, help="RSA key file (default: DATA/notary.key)")
    kg.add_argument("--cert", type=Path, help="certificate file (default: DATA/notary.pem)")
    kg.add_argument("--hostname", default="localhost",
                    help="name (or IP address) in the certificate (default: %(default)s)")
    kg.add_argument("--force", action="store_true",
                    help="replace existing key and certificate (default: refuse)")
    kg.add_argument("--signing-key", type=Path,
                    help="Ed25519 signing key file (default: DATA/signing.key)")
    kg.add_argument("--rotate-signing-key", action="store_true",
                    help="replace only the Ed25519 signing key; the old one stays in bundles "
                    "as retired for the overlap period")

    rl = sub.add_parser("reload", help="make a running notary reload its keys (SIGHUP)",
                        description="Send SIGHUP to the notary serving DATA (its pid is in "
                        "DATA/notary.pid): it reads its Ed25519 signing key and its TLS "
                        "certificate again without dropping connections. See "
                        "docs/operations.md, \"Rotating keys\".")
    rl.add_argument("--data-dir", type=Path, default=MAKE_RUN_DATA,
                    help="the running notary's data directory (default: %(default)s, "
                    "where make run keeps it)")
    rl.add_argument("--pid-file", type=Path,
                    help="pid file to read instead (default: DATA/notary.pid)")

    d = sub.add_parser("demo", help="a notary and a local TLS site to try it offline",
                       description="Serve a notary on loopback and a TLS site, site.test, on "
                       "another loopback port, with the notary allowed to probe it; print the "
                       "commands to try (README, \"Try it\"). Not for a public notary: it "
                       "probes loopback addresses.")
    d.add_argument("--data-dir", type=Path, default=Path("var/demo"),
                   help="directory for the notary's and the site's keys (default: "
                   "%(default)s)")
    d.add_argument("--port", type=int, default=8443,
                   help="the notary's port on 127.0.0.1 (default: %(default)s)")
    d.add_argument("--site-port", type=int, default=9443,
                   help="the site's port on 127.0.0.1 (default: %(default)s)")

    b = sub.add_parser("bundle", help="write a v1 .notary bundle for this notary",
                       description="Write the .notary bundle clients import: this notary's "
                       "pinned certificate, host and ports, and its signing keys.")
    b.add_argument("--data-dir", type=Path, default=MAKE_RUN_DATA,
                   help="directory with notary.pem and signing.key (default: %(default)s, "
                   "where make run keeps them)")
    b.add_argument("--cert", type=Path, help="certificate to pin (default: DATA/notary.pem)")
    b.add_argument("--signing-key", type=Path,
                   help="Ed25519 signing key to advertise (default: DATA/signing.key, if "
                   "present)")
    b.add_argument("--host", required=True, help="public DNS name of this notary (required)")
    b.add_argument("--ssl-port", type=int, default=8443,
                   help="port of the notary's HTTPS API (default: %(default)s, the port "
                   "notary serve and make run listen on; 443 for a public notary)")
    b.add_argument("--http-port", type=int, default=80,
                   help="port of its plain-HTTP bounce relay (default: %(default)s)")
    b.add_argument("--name", required=True, help="organisation name (required)")
    b.add_argument("--bundle-location",
                   help="https://.../NAME.notary where the bundle is published (default: "
                   "https://HOST[:SSL-PORT]/NAME.notary)")
    b.add_argument("--region", help="ISO-3166 alpha-2 region (default: none)")
    b.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    b.add_argument("--log-url", help="where clients and monitors read the transparency log "
                   "(default: https://HOST[:SSL-PORT]/log)")
    b.add_argument("--witness", action="append", default=[], metavar="VKEY",
                   help="a witness whose cosignature clients require on the log's checkpoints "
                   "(its verifier key; repeatable; default none)")
    b.add_argument("--min-cosignatures", type=int, metavar="N",
                   help="how many of those witnesses must cosign (default: all of them)")
    b.add_argument("--no-log", action="store_true",
                   help="do not name the transparency log in the bundle (default: named when "
                   "DATA/log.key exists)")

    lk = sub.add_parser("log-key", help="print the transparency log's verifier key",
                        description="Print the verifier key (<name>+<id>+<key>, "
                        "c2sp.org/signed-note) of this notary's transparency log, made with "
                        "its key on first use.")
    lk.add_argument("--data-dir", type=Path, default=Path("notary-data"),
                    help="directory with log.key (default: %(default)s)")
    lk.add_argument("--log-key", type=Path, help="the log key (default: DATA/log.key)")
    lk.add_argument("--hostname", default="localhost",
                    help="the host name in a new log's origin (default: %(default)s)")
    lk.add_argument("--log-origin", help="origin of a new log (default: "
                    "HOSTNAME/converge-log/<key id>)")

    w = sub.add_parser("witness", help="witness other notaries' logs (c2sp.org/tlog-witness)",
                       description="Cosign the checkpoints of the logs named by --log when "
                       "each is consistent with the last one cosigned: POST /add-checkpoint "
                       "(c2sp.org/tlog-witness), cosignatures per c2sp.org/tlog-cosignature.")
    _witness_identity_args(w)
    w.add_argument("--listen", default="127.0.0.1:7380", metavar="HOST:PORT",
                   help="address to serve on (default: %(default)s)")
    w.add_argument("--log", action="append", default=[], metavar="VKEY",
                   help="a log to witness: its verifier key <origin>+<id>+<key> (repeatable; "
                   "required, default none)")
    w.add_argument("--print-key", action="store_true",
                   help="print the witness's verifier key and exit")
    wk = sub.add_parser("witness-key", help="print the witness's verifier key",
                        description="Print the cosignature verifier key of `notary witness` "
                        "(made with its key on first use), for notaries' --log-witness and "
                        "bundles' --witness.")
    _witness_identity_args(wk)

    m = sub.add_parser("monitor", help="follow a notary's transparency log and report",
                       description="Follow a notary's log through its tiles: verify each "
                       "checkpoint (log key, required cosignatures), authenticate the tiles, "
                       "check consistency with the last checkpoint kept in --state (a fork, a "
                       "rewritten log) and with --peer-checkpoint (a split view), read the new "
                       "entries and re-probe those of --watch names from here (a certificate "
                       "this monitor does not see). Exit status: 0 all good, 1 something "
                       "detected, 2 usage, 3 the log unreachable.")
    m.add_argument("url", metavar="URL", help="the log's prefix, e.g. https://notary.example/log")
    m.add_argument("--log-key", required=True, metavar="VKEY",
                   help="the log's verifier key (notary log-key; a bundle's transparency.log)")
    m.add_argument("--witness", action="append", default=[], metavar="VKEY",
                   help="a witness's cosignature key (repeatable; default none)")
    m.add_argument("--min-cosignatures", type=int, metavar="N",
                   help="cosignatures required on each checkpoint (default: all --witness)")
    m.add_argument("--state", type=Path, metavar="DIR",
                   help="keep the last verified checkpoint here (default: none, every pass "
                   "starts afresh)")
    m.add_argument("--watch", action="append", default=[], metavar="NAME",
                   help="re-probe the entries for this host name from here (repeatable; "
                   "default none)")
    m.add_argument("--peer-checkpoint", action="append", default=[], type=Path,
                   metavar="FILE", help="a checkpoint of this log obtained elsewhere, to "
                   "compare (repeatable; default none)")
    m.add_argument("--resolve", action="append", default=[], metavar="NAME=IP",
                   help="static name map entry, repeatable (default: none)")
    m.add_argument("--allow-target", action="append", default=[], metavar="CIDR",
                   help="allow probing this otherwise refused range (repeatable; default "
                   "none)")
    m.add_argument("--probe-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="connect+handshake timeout of a probe (default: %(default)s)")
    m.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="timeout of each request to the log (default: %(default)s)")
    m.add_argument("--json", action="store_true", help="one JSON object per event")
    once = m.add_mutually_exclusive_group()
    once.add_argument("--once", action="store_true", help="one pass, then exit")
    once.add_argument("--interval", type=float, default=60.0, metavar="SECONDS",
                      help="seconds between passes (default: %(default)s)")
    m.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="serve Prometheus /metrics here (default: off)")

    c = sub.add_parser("check", help="probe a target once and print what it presents",
                       description="Connect to a TLS site from this machine and print the "
                       "certificate fingerprints and chain it presents.")
    c.add_argument("target", metavar="HOST[:PORT]", help="the site (port default: 443)")
    c.add_argument("--ip", help="connect to this address, sending HOST as SNI "
                   "(default: resolve HOST)")
    c.add_argument("--timeout", type=float, default=5.0,
                   help="seconds for resolution, connect and handshake (default: %(default)s)")
    c.add_argument("--resolve", action="append", metavar="NAME=IP", default=[],
                   help="static name map entry, repeatable (default: none)")
    c.add_argument("--json", action="store_true",
                   help="machine-readable output (default: text)")
    return p


def _witness_identity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=Path("witness-data"),
                   help="directory for witness.key, witness.name and witness.sqlite3 "
                   "(default: %(default)s)")
    p.add_argument("--name", help="the witness's name in its cosignatures, fixed when its key "
                   "is made (default: localhost/converge-witness/<key id>)")


def settings_from_args(args: argparse.Namespace) -> Settings:
    values: dict[str, Any] = load_toml(args.config) if args.config else {}
    names = {f.name for f in fields(Settings)}
    for flag, _ in _SERVE_FLAGS:
        name = flag[2:].replace("-", "_")
        value = getattr(args, name)
        if value is not None and name in names:
            values[name] = value
    if args.no_tls:
        values["tls"] = False
    if args.log_client_addresses:
        values["log_client_addresses"] = True
    if args.ca_no_mozilla:
        values["ca_no_mozilla"] = True
    if args.no_log:
        values["transparency_log"] = False
    settings = Settings(**values)
    settings.check()
    return settings


def _cmd_serve(args: argparse.Namespace) -> int:
    from notary.server import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run(settings_from_args(args), access_log=args.access_log)


def _cmd_keygen(args: argparse.Namespace) -> int:
    key = args.key or args.data_dir / "notary.key"
    cert = args.cert or args.data_dir / "notary.pem"
    signing = args.signing_key or args.data_dir / "signing.key"
    if args.rotate_signing_key:
        now = int(dt.datetime.now(dt.UTC).timestamp())
        new = keys.rotate_signing_key(signing, now=now)
        print(f"signing key rotated: new key id {extended.key_id(new.public_key())};"
              f" publish a new bundle (notary bundle) so clients learn it, then make the "
              f"running notary sign with it: notary reload --data-dir {args.data_dir}")
        return EXIT_OK
    if (key.exists() or cert.exists()) and not args.force:
        print(f"notary: {key} or {cert} exists; use --force to replace", file=sys.stderr)
        return EXIT_FAIL
    keys.private_dir(key.parent)
    ident = keys.generate(key, cert, args.hostname, now=dt.datetime.now(dt.UTC))
    if args.force and signing.exists():
        signing.unlink()
    sk = keys.ensure_signing_key(signing)
    print(f"key:  {key} (mode 600)\ncert: {cert}\npin SHA-1:   {ident.pin_sha1}\n"
          f"pin SHA-256: {ident.pin_sha256}\nsigning key: {signing} (Ed25519, id "
          f"{extended.key_id(sk.public_key())})")
    return EXIT_OK


def _cmd_reload(args: argparse.Namespace) -> int:
    path = args.pid_file or args.data_dir / "notary.pid"
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"notary: cannot read {path} (is a notary serving {args.data_dir}?): "
              f"{getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return EXIT_FAIL
    if not text.isdigit() or int(text) <= 1:
        raise BadConfig(f"{path} does not hold a process id")
    try:
        os.kill(int(text), signal.SIGHUP)
    except OSError as exc:
        print(f"notary: cannot signal process {text} from {path}: {exc.strerror}",
              file=sys.stderr)
        return EXIT_FAIL
    print(f"sent SIGHUP to notary process {text}; its log says what it reloaded")
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    from notary.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    return run_demo(args.data_dir, args.port, args.site_port)


def make_bundle(
    cert_pem: str, host: str, ssl_port: int, http_port: int, name: str,
    location: str | None, region: str | None,
) -> dict[str, Any]:
    """A v1 bundle document (convergence-v1.md, "Bundle file")."""
    host = normalise_host(host)
    parse_port(str(ssl_port))
    parse_port(str(http_port))
    if location is None:
        slug = "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-") or "notary"
        authority = f"[{host}]" if ":" in host else host
        if ssl_port != 443:
            authority += f":{ssl_port}"
        location = f"https://{authority}/{slug}.notary"
    if not (location.startswith("https://") and location.endswith(".notary")):
        raise BadConfig("--bundle-location must start with https:// and end with .notary")
    doc: dict[str, Any] = {
        "version": 1,
        "name": name,
        "bundle_location": location,
        "hosts": [
            {"host": host, "ssl_port": ssl_port, "http_port": http_port, "certificate": cert_pem}
        ],
    }
    if region:
        if len(region) != 2 or not region.isalpha():
            raise BadConfig("--region must be an ISO-3166 alpha-2 code")
        doc["region"] = region.upper()
    return doc


def _cmd_bundle(args: argparse.Namespace) -> int:
    cert_path = args.cert or args.data_dir / "notary.pem"
    try:
        pem = cert_path.read_text(encoding="ascii")
        x509.load_pem_x509_certificate(pem.encode())
    except (OSError, ValueError) as exc:
        raise BadConfig(f"cannot read certificate {cert_path}: {exc}") from exc
    doc = make_bundle(pem, args.host, args.ssl_port, args.http_port, args.name,
                      args.bundle_location, args.region)
    signing = args.signing_key or args.data_dir / "signing.key"
    if signing.exists():
        now = int(dt.datetime.now(dt.UTC).timestamp())
        doc["protocols"] = ["convergence-v1", extended.FORMAT]
        doc["signing_keys"] = keys.bundle_signing_keys(signing, now=now)
    log_key = args.data_dir / "log.key"
    if log_key.exists() and not args.no_log:
        doc["transparency"] = _bundle_transparency(args, log_key)
    text = json.dumps(doc, indent=2) + "\n"
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _bundle_transparency(args: argparse.Namespace, log_key: Path) -> dict[str, Any]:
    """The bundle's ``transparency`` member (docs/transparency.md, "Bundles")."""
    key, origin = keys.ensure_log_identity(log_key, "localhost")
    log = Signer(origin, key).verifier
    try:  # the clients' rules: cosignature keys, no key named twice (nor the log's)
        parsed = parse_witnesses(args.witness, log)
    except NoteError as exc:
        raise BadConfig(str(exc)) from exc
    witnesses = [{"name": w.name, "vkey": vkey} for w, vkey in zip(parsed, args.witness,
                                                                    strict=True)]
    need = len(witnesses) if args.min_cosignatures is None else args.min_cosignatures
    if not 0 <= need <= len(witnesses):
        raise BadConfig(f"--min-cosignatures must be from 0 to {len(witnesses)}")
    host = normalise_host(args.host)
    authority = f"[{host}]" if ":" in host else host
    if args.ssl_port != 443:
        authority += f":{args.ssl_port}"
    return {
        "log": log.vkey(),
        "url": args.log_url or f"https://{authority}/log",
        "witnesses": witnesses,
        "min_cosignatures": need,
    }


def _cmd_log_key(args: argparse.Namespace) -> int:
    path = args.log_key or args.data_dir / "log.key"
    keys.private_dir(path.parent)
    key, origin = keys.ensure_log_identity(path, args.hostname, args.log_origin)
    print(Signer(origin, key).verifier.vkey())
    return EXIT_OK


def _witness_signer(data_dir: Path, name: str | None) -> Signer:
    """The witness's cosignature key (DATA/witness.key, Ed25519, made on first run) and name
    (DATA/witness.name, fixed when the key is made)."""
    keys.private_dir(data_dir)
    key_path, name_path = data_dir / "witness.key", data_dir / "witness.name"
    fresh = not key_path.exists()
    key = keys.ensure_signing_key(key_path)
    if fresh or not name_path.exists():
        if name is None:
            raw = Signer("w", key, COSIGNATURE).verifier.raw
            name = f"localhost/converge-witness/{hashlib.sha256(raw).hexdigest()[:8]}"
        name_path.write_text(name + "\n", encoding="utf-8")
    kept = name_path.read_text(encoding="utf-8").strip()
    if name is not None and name != kept:
        raise BadConfig(f"--name {name!r} differs from the witness's name {kept!r} in "
                        f"{name_path}: a witness keeps its name with its key")
    signer = Signer(kept, key, COSIGNATURE)
    try:
        signer.verifier  # noqa: B018 - checks the name
    except NoteError as exc:
        raise BadConfig(f"{name_path}: {exc}") from exc
    return signer


def _cmd_witness_key(args: argparse.Namespace) -> int:
    print(_witness_signer(args.data_dir, args.name).verifier.vkey())
    return EXIT_OK


def _cmd_witness(args: argparse.Namespace) -> int:
    from notary.tlog import witness

    signer = _witness_signer(args.data_dir, args.name)
    if args.print_key:
        print(signer.verifier.vkey())
        return EXIT_OK
    if not args.log:
        raise BadConfig("notary witness needs at least one --log VKEY")
    host, port = parse_listen(args.listen)
    state = witness.WitnessState(args.data_dir / "witness.sqlite3")
    w = witness.Witness(signer, witness.parse_logs(args.log), state)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"witness {signer.verifier.vkey()} on http://{args.listen}/add-checkpoint "
          f"for {', '.join(sorted(w.logs))}", flush=True)
    try:
        asyncio.run(witness.serve(w, host, port))
    finally:
        state.close()
    return EXIT_OK


def _cmd_monitor(args: argparse.Namespace) -> int:
    from notary.config import Settings as S
    from notary.tlog import monitor

    try:
        log = Verifier.parse(args.log_key)
        witnesses = parse_witnesses(args.witness, log)
    except NoteError as exc:
        raise BadConfig(str(exc)) from exc
    need = len(witnesses) if args.min_cosignatures is None else args.min_cosignatures
    if not 0 <= need <= len(witnesses):
        raise BadConfig(f"--min-cosignatures must be from 0 to {len(witnesses)}")
    if not args.url.startswith(("http://", "https://")):
        raise BadConfig("the log URL must start with http:// or https://")
    if args.interval <= 0 or args.timeout <= 0 or args.probe_timeout <= 0:
        raise BadConfig("--interval, --timeout and --probe-timeout must be positive")
    for name in args.watch:
        normalise_host(name)
    prober = TLSProber(build_resolver(S(resolve=args.resolve)),
                       AddressPolicy(parse_networks(args.allow_target)), args.probe_timeout)

    async def probe(target: Target) -> CertDigests:
        return (await prober.probe(target)).digests

    settings = monitor.Settings(args.url, log, witnesses, need, args.state, args.watch,
                                args.peer_checkpoint, args.timeout)
    metrics = None
    if args.metrics_listen:
        metrics = monitor.Metrics()
        host, port = parse_listen(args.metrics_listen)
        metrics.serve(host, port)

    def emit(e: monitor.Event) -> None:
        if args.json:
            print(e.json(), flush=True)
        else:
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            print(f"{now} {e.line()}", flush=True)

    return asyncio.run(monitor.run(monitor.Monitor(settings, probe), emit, once=args.once,
                                   interval=args.interval, metrics=metrics))


def _split_hostport(spec: str) -> tuple[str, int]:
    ip = parse_ip(spec)
    if ip is not None:
        return ip.compressed, 443
    host, sep, port = spec.rpartition(":")
    if sep and host and not host.endswith(":"):
        return normalise_host(host), parse_port(port)
    return normalise_host(spec), 443


def _cmd_check(args: argparse.Namespace) -> int:
    from notary.config import Settings as S
    from notary.core.target import Target

    host, port = _split_hostport(args.target)
    ip = None
    if args.ip:
        ip = parse_ip(args.ip)
        if ip is None:
            raise BadConfig(f"--ip {args.ip!r} is not an IP address")
    resolver = build_resolver(S(resolve=args.resolve))
    # An operator's own tool: every address is allowed.
    policy = AddressPolicy(parse_networks(["0.0.0.0/0", "::/0"]))
    prober = TLSProber(resolver, policy, args.timeout, want_chain=True)
    result = asyncio.run(prober.probe(Target(host, port, ip)))
    chain = []
    for der in result.chain or (result.leaf,):
        try:
            cert = load_certificate(der)
        except BadData as exc:  # the target sent it: report it, do not crash on it
            chain.append({"subject": None, "issuer": None, "defect": exc.message})
            continue
        chain.append({"subject": cert.subject.rfc4514_string(),
                      "issuer": cert.issuer.rfc4514_string()})
    doc = {
        "target": Target(host, port, ip).location,
        "address": result.address,
        "sha1": colon_hex(result.digests.sha1),
        "sha256": colon_hex(result.digests.sha256),
        "chain": chain,
    }
    if args.json:
        print(json.dumps(doc))
    else:
        print(f"target:  {doc['target']} ({result.address})")
        print(f"SHA-1:   {doc['sha1']}")
        print(f"SHA-256: {doc['sha256']}")
        for i, c in enumerate(chain):
            if c["subject"] is None:
                print(f"chain[{i}]: (does not parse: {c['defect']})")
            else:
                print(f"chain[{i}]: {c['subject']}  (issuer: {c['issuer']})")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {"serve": _cmd_serve, "keygen": _cmd_keygen, "bundle": _cmd_bundle,
               "reload": _cmd_reload, "demo": _cmd_demo,
               "check": _cmd_check, "log-key": _cmd_log_key, "witness": _cmd_witness,
               "witness-key": _cmd_witness_key, "monitor": _cmd_monitor}[args.command]
    try:
        return handler(args)
    except BadInput as exc:
        print(f"notary: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except NotaryError as exc:
        print(f"notary: {exc.message}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
