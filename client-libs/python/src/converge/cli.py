"""The ``converge`` command.

    converge [--config-dir DIR] check HOST[:PORT] [--fingerprint FP] [--json]
                                      [--save-answers DIR]
    converge verify-answer FILE --bundle B.notary [--host H --port P [--ip IP]] [--fingerprint FP]
                                      [--nonce N] [--now T] [--max-skew S] [--json]
    converge [--config-dir DIR] init
    converge [--config-dir DIR] notary add FILE|URL [--disabled] [--cafile PEM]
    converge [--config-dir DIR] notary list [--json]
    converge [--config-dir DIR] notary update [NAME] [--cafile PEM]
    converge [--config-dir DIR] notary enable|disable|remove NAME
    converge [--config-dir DIR] cache list [--json]
    converge [--config-dir DIR] cache clear [HOST[:PORT]]

Exit status of ``check``: 0 trusted, 1 not trusted, 2 error (bad input, configuration, or
the target could not be reached). ``verify-answer``: 0 the answer verifies, 1 it is
rejected (the failure kind is printed), 2 usage error (unreadable file, bad bundle, bad
arguments). With a bundle that names a transparency log, ``verify-answer`` also checks a
``match`` answer's proof of inclusion (a failure is a ``log-*`` kind) and prints the entry's
index, the tree size and root it is proved against, and the witnesses that cosigned.
Other commands: 0 on success, 2 on error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import time
import urllib.request
from pathlib import Path
from typing import TextIO

from . import __version__
from .bundle import NotaryBundle, parse_bundle
from .cache import LocalCache
from .client import Client, Verdict
from .config import (
    CONFIG_FILE,
    ENV_VAR,
    add_notary,
    default_user_dir,
    discover_config_dir,
    list_notaries,
    load_config,
    remove_notary,
    set_enabled,
)
from .errors import (
    BadInput,
    BundleError,
    ConfigError,
    ConvergeError,
    TargetError,
    TargetIOError,
)
from .extended import (
    DEFAULT_MAX_SKEW,
    MAX_ANSWER,
    AnswerRejected,
    VerifiedAnswer,
    check_log,
    describe,
    trusted_keys,
    verify_answer,
)
from .fingerprint import Fingerprint, fingerprint_of, parse_fingerprint
from .legacy import location
from .tls import fetch_certificate
from .transparency import Proven

MAX_BUNDLE_DOWNLOAD = 64 * 1024
MAX_ANSWER_FILE = MAX_ANSWER


class UsageError(BadInput):
    kind = "usage"

DEFAULT_CONFIG = {
    "db": "cache.sqlite3",
    "notaries-dir": ".",
    "notary-agreement": "majority",
    "quorum": 3,
    "connect-timeout": 3,
    "notary-timeout": 5,
    "total-timeout": 10,
    "cache-lifetime": 604800,
    "stand-aside": True,
    "early-return": True,
}


def _split_hostport(text: str, default_port: int = 443) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        return text, default_port
    if not port.isdigit():
        raise TargetError(f"bad port in {text!r}")
    return host.strip("[]"), int(port)


def _config_dir(args: argparse.Namespace, *, create: bool = False) -> Path:
    """The configuration directory in the discovery order (--config-dir, $CONVERGE_CONFIG_DIR,
    the user's, the system's); with ``create``, a missing one is made where the first of
    --config-dir, $CONVERGE_CONFIG_DIR and the user's directory points."""
    try:
        return discover_config_dir(args.config_dir)
    except ConfigError:
        if not create:
            raise
        return _make_config_dir(args)


def _make_config_dir(args: argparse.Namespace) -> Path:
    if args.config_dir is not None:
        d = Path(args.config_dir)
    elif os.environ.get(ENV_VAR):
        d = Path(os.environ[ENV_VAR])
    else:
        d = default_user_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        (d / "notaries-available").mkdir(exist_ok=True)
        (d / "notaries-enabled").mkdir(exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {d}: {e}") from e
    return d


def _print_verdict(v: Verdict, out: TextIO, sha256: str | None) -> None:
    print(f"target       {v.host}:{v.port}", file=out)
    print(f"certificate  SHA-1   {v.fingerprint}", file=out)
    if sha256:
        print(f"             SHA-256 {sha256}", file=out)
    print(
        f"policy       {v.policy.value}, unreachable notaries "
        f"{'stand aside' if v.stand_aside else 'count as failures'}",
        file=out,
    )
    if v.from_cache:
        print("answered by  local cache", file=out)
    else:
        rows = [("notary", "result", "why", "status", "format", "host", "time")]
        for r in v.results:
            rows.append(
                (
                    r.name,
                    r.vote,
                    r.kind,
                    str(r.status or "-"),
                    r.protocol or "-",
                    r.host or "-",
                    f"{r.elapsed * 1000:.1f} ms" if r.elapsed else "-",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(7)]
        for row in rows:
            print(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out
            )
    print(f"verdict      {'TRUSTED' if v else 'NOT TRUSTED'} ({v.reason})", file=out)


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    host, port = _split_hostport(args.target)
    client = Client(_config_dir(args))
    sha256 = None
    if args.fingerprint:
        v = client.check(host, port, args.fingerprint)
    else:
        der = fetch_certificate(host, port, timeout=client.config.connect_timeout)
        sha256 = fingerprint_of(der, "sha256").colon_hex()
        v = client.check(host, port, fingerprint_of(der), certificate=der)
    saved = _save_answers(Path(args.save_answers), v) if args.save_answers else []
    if args.json:
        doc = v.to_json()
        if args.save_answers:
            doc["saved_answers"] = [str(p) for p in saved]
        print(json.dumps(doc), file=out)
    else:
        _print_verdict(v, out, sha256)
        for p in saved:
            print(f"saved        {p}", file=out)
    client.close()
    return 0 if v else 1


def _save_answers(directory: Path, v: Verdict) -> list[Path]:
    """Write each verified extended answer of ``v`` as ``<notary>.<host>_<port>.<time>.answer``
    (the signed bytes exactly as received; ``converge verify-answer`` checks them)."""
    saved = []
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for r in v.results:
            if r.answer is None:
                continue
            stmt = json.loads(r.answer)["statement"]
            name = re.sub(r"[^A-Za-z0-9.-]+", "-", r.name).strip("-") or "notary"
            host = re.sub(r"[^A-Za-z0-9.-]+", "-", v.host)
            path = directory / f"{name}.{host}_{v.port}.{stmt['answered_at']}.answer"
            path.write_bytes(r.answer)
            saved.append(path)
    except OSError as e:
        raise ConfigError(f"cannot save answers in {directory}: {e}") from e
    return saved


def _iso(t: object) -> str:
    if isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**37:
        return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))
    return str(t)


def cmd_verify_answer(args: argparse.Namespace, out: TextIO) -> int:
    """Check a saved extended answer offline and print what it proves."""
    if (args.host is None) != (args.port is None):
        raise UsageError("--host and --port go together")
    if args.ip is not None and args.host is None:
        raise UsageError("--ip goes with --host and --port")
    try:
        raw = Path(args.file).read_bytes()[: MAX_ANSWER_FILE + 1]
        bundle_bytes = Path(args.bundle).read_bytes()[: MAX_BUNDLE_DOWNLOAD + 1]
    except OSError as e:
        raise UsageError(f"cannot read: {e}") from e
    bundle = parse_bundle(bundle_bytes)
    if not bundle.signing_keys:
        raise BundleError(f"bundle of {bundle.name!r} carries no signing_keys")
    fp = parse_fingerprint(args.fingerprint) if args.fingerprint else None
    now = int(args.now) if args.now is not None else int(time.time())
    check_time = args.now is not None or args.max_skew is not None
    max_skew = args.max_skew if args.max_skew is not None else DEFAULT_MAX_SKEW
    try:
        v = verify_answer(
            raw,
            trusted_keys(bundle.signing_keys, now),
            host=args.host,
            port=args.port,
            fingerprint=fp,
            nonce=args.nonce,
            now=now if check_time else None,
            max_skew=max_skew,
            # with --host, an answer about an address someone named is refused unless --ip
            # names the same address: the notary probed that address, not the host's own
            ip=args.ip,
            bind_ip=args.host is not None,
        )
        logged = _check_logged(v, bundle, fp)
    except AnswerRejected as e:
        if args.json:
            print(json.dumps({"result": "rejected", "kind": e.kind, "message": str(e)}), file=out)
        else:
            print(f"REJECTED ({e.kind}): {e}", file=out)
        return 1
    key = next(k for k in bundle.signing_keys if k.key_id == v.key_id)
    proven = {"result": "valid", "notary": bundle.name, "key_status": key.status, **describe(v)}
    proven["transparency"] = logged.to_json() if logged else None
    checked = ["signature", "canonical bytes"]
    if args.host is not None:
        checked.append("target" if args.ip is None else "target and address")
    if fp is not None:
        checked.append("fingerprint")
    if args.nonce is not None:
        checked.append("nonce")
    if check_time:
        checked.append(f"time within {max_skew} s of {_iso(now)}")
    if logged is not None:
        ck = logged.checkpoint
        cosigned = f", cosigned by {', '.join(ck.cosigned_by)}" if ck.cosigned_by else ""
        checked.append(f"entry {logged.index} of the log {ck.origin} (tree size {ck.size}"
                       f"{cosigned})")
    proven["checked"] = checked
    if args.json:
        print(json.dumps(proven), file=out)
        return 0
    s = v.statement
    target = s.get("target") or {}
    request = s.get("request") or {}
    print(f"VALID: signed by notary {bundle.name!r}, key {v.key_id} ({key.status})", file=out)
    print(f"target       {target.get('host')}:{target.get('port')}"
          + (f" (ip {target['ip']})" if target.get("ip") else ""), file=out)
    print(f"address      {s.get('address') or '- (answered from the cache)'}", file=out)
    print(f"asked about  {request.get('alg')} {request.get('fingerprint')}", file=out)
    print(f"nonce        {request.get('nonce')}", file=out)
    print(f"verdict      {v.verdict}" + (f" ({s['detail']})" if s.get("detail") else ""),
          file=out)
    print(f"answered at  {_iso(s.get('answered_at'))} ({s.get('answered_at')}),"
          f" cache {s.get('cache')}", file=out)
    observations = s.get("observations") or []
    print(f"observations {len(observations)}", file=out)
    for o in observations:
        if isinstance(o, dict):
            print(f"  SHA-256 {o.get('sha256')}", file=out)
            print(f"  SHA-1   {o.get('sha1')}", file=out)
            print(f"          seen {_iso(o.get('first_seen'))} .. {_iso(o.get('last_seen'))}",
                  file=out)
    if logged is not None:
        ck = logged.checkpoint
        print(f"logged       entry {logged.index} of {ck.origin}, tree size {ck.size}, root "
              f"{proven['transparency']['root']}", file=out)
    print(f"checked      {', '.join(checked)}", file=out)
    return 0


def _check_logged(
    v: VerifiedAnswer, bundle: NotaryBundle, fp: Fingerprint | None
) -> Proven | None:
    """The answer's proof of inclusion in the bundle's log (a ``match`` only), or ``None``."""
    if bundle.transparency is None or v.verdict != "match":
        return None
    return check_log(v, bundle.transparency, fp)


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    d = _make_config_dir(args)  # --config-dir, else $CONVERGE_CONFIG_DIR, else the user's
    f = d / CONFIG_FILE
    if not f.exists():
        f.write_text(json.dumps(DEFAULT_CONFIG, indent=2) + "\n")
    load_config(d)
    print(f"configuration in {d}", file=out)
    return 0


def _fetch_bundle(url: str, cafile: str | None) -> bytes:
    if not url.startswith("https://"):
        raise ConfigError("bundles are fetched over https:// only")
    ctx = ssl.create_default_context(cafile=cafile)
    try:
        with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
            data: bytes = resp.read(MAX_BUNDLE_DOWNLOAD + 1)
    except (OSError, ssl.SSLError) as e:
        raise TargetIOError(f"cannot fetch {url}: {e}") from e
    if len(data) > MAX_BUNDLE_DOWNLOAD:
        raise ConfigError(f"{url} is larger than {MAX_BUNDLE_DOWNLOAD} bytes")
    return data


def cmd_notary(args: argparse.Namespace, out: TextIO) -> int:
    if args.notary_cmd == "add":
        d = _config_dir(args, create=True)
        ndir = load_config(d).notaries_dir or d
        src = args.source
        if src.startswith(("https://", "http://")):
            data = _fetch_bundle(src, args.cafile)
        else:
            try:
                data = Path(src).read_bytes()[: MAX_BUNDLE_DOWNLOAD + 1]
            except OSError as e:
                raise ConfigError(f"cannot read {src}: {e}") from e
        bundle, path = add_notary(ndir, data, enable=not args.disabled)
        state = "disabled" if args.disabled else "enabled"
        print(
            f"added {bundle.name!r} ({len(bundle.hosts)} host(s)) as {path.name}, {state}", file=out
        )
        return 0
    d = _config_dir(args)
    ndir = load_config(d).notaries_dir or d
    if args.notary_cmd == "list":
        items = list_notaries(ndir)
        if args.json:
            print(
                json.dumps(
                    [
                        {
                            "name": b.name,
                            "enabled": en,
                            "file": p.name,
                            "hosts": [f"{h.host}:{h.ssl_port}" for h in b.hosts],
                            "extended": b.offers_extended,
                            "signing_keys": [k.key_id for k in b.signing_keys],
                        }
                        for b, en, p in items
                    ]
                ),
                file=out,
            )
        else:
            for b, en, p in items:
                hosts = ", ".join(f"{h.host}:{h.ssl_port}" for h in b.hosts)
                ext = "  (converge-answer/1)" if b.offers_extended else ""
                print(f"{'*' if en else ' '} {b.name}  [{p.name}]  {hosts}{ext}", file=out)
            if not items:
                print("no notaries; add one with: converge notary add FILE|URL", file=out)
        return 0
    if args.notary_cmd == "update":
        return _update_bundles(ndir, args, out)
    if args.notary_cmd in ("enable", "disable"):
        b = set_enabled(ndir, args.name, args.notary_cmd == "enable")
        print(f"{args.notary_cmd}d {b.name!r}", file=out)
        return 0
    b = remove_notary(ndir, args.name)
    print(f"removed {b.name!r}", file=out)
    return 0


def _update_bundles(ndir: Path, args: argparse.Namespace, out: TextIO) -> int:
    """Re-fetch each bundle from its ``bundle_location``; the name must not change."""
    failed = 0
    items = [t for t in list_notaries(ndir) if args.name in (None, t[0].name, t[2].stem)]
    if args.name is not None and not items:
        raise ConfigError(f"no notary named {args.name!r}")
    for bundle, enabled, path in items:
        if not bundle.bundle_location:
            print(f"{bundle.name}: no bundle_location, skipped", file=out)
            continue
        try:
            data = _fetch_bundle(bundle.bundle_location, args.cafile)
            fresh = parse_bundle(data)
            if fresh.name != bundle.name:
                raise BundleError(f"the published bundle is named {fresh.name!r}")
        except ConvergeError as e:
            failed += 1
            print(f"{bundle.name}: not updated ({e.kind}): {e}", file=out)
            continue
        if fresh == bundle:
            print(f"{bundle.name}: unchanged", file=out)
            continue
        add_notary(ndir, data, enable=enabled)
        print(f"{bundle.name}: updated ({path.name})", file=out)
    return 2 if failed else 0


def cmd_cache(args: argparse.Namespace, out: TextIO) -> int:
    cfg = load_config(_config_dir(args))
    path = cfg.userdb or cfg.db
    if path is None:
        raise ConfigError("no cache database configured")
    cache = LocalCache(path)
    try:
        if args.cache_cmd == "list":
            rows = cache.entries()
            if args.json:
                print(
                    json.dumps(
                        [{"location": a, "fingerprint": b, "timestamp": c} for a, b, c in rows]
                    ),
                    file=out,
                )
            else:
                for loc, fp, ts in rows:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))
                    print(f"{loc}  {fp}  {when}Z", file=out)
                print(f"{len(rows)} entries in {path}", file=out)
        else:
            where = None
            if args.target:
                where = location(*_split_hostport(args.target))
            n = cache.clear(where)
            print(f"removed {n} entries", file=out)
    finally:
        cache.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="converge",
        description="Check TLS certificates with Convergence notaries.",
        epilog=f"Configuration: --config-dir, ${ENV_VAR}, ~/.config/converge, "
        "/usr/local/etc/converge.",
    )
    ap.add_argument("--version", action="version", version=f"converge {__version__}")
    ap.add_argument("--config-dir", help="configuration directory")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="fetch HOST's certificate and ask the notaries")
    c.add_argument("target", metavar="HOST[:PORT]")
    c.add_argument("--fingerprint", help="check this SHA-1/SHA-256 instead of connecting")
    c.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    c.add_argument(
        "--save-answers",
        metavar="DIR",
        help="write each notary's verified extended answer into DIR (for verify-answer)",
    )
    va = sub.add_parser(
        "verify-answer", help="check a saved extended answer offline and print what it proves"
    )
    va.add_argument("file", metavar="FILE")
    va.add_argument("--bundle", required=True, help="the notary's .notary bundle")
    va.add_argument("--host", help="the target the answer must be about")
    va.add_argument("--port", type=int, help="the target's port (with --host)")
    va.add_argument("--ip", help="the address the answer's probe must have been made to, "
                    "when the client named one (with --host; default: none, and an answer "
                    "about a client-named address is wrong-target)")
    va.add_argument("--fingerprint", help="the fingerprint the answer must be about")
    va.add_argument("--nonce", help="the nonce the answer must echo")
    va.add_argument(
        "--now",
        type=int,
        help="unix time for key validity and freshness (default: the clock; freshness is "
        "checked only with --now or --max-skew)",
    )
    va.add_argument("--max-skew", type=int, help=f"seconds (default {DEFAULT_MAX_SKEW})")
    va.add_argument("--json", action="store_true", help="one JSON object")
    sub.add_parser("init", help="create a configuration directory")
    n = sub.add_parser("notary", help="manage notary bundles")
    nsub = n.add_subparsers(dest="notary_cmd", required=True)
    a = nsub.add_parser("add", help="import a .notary bundle from a file or https:// URL")
    a.add_argument("source", metavar="FILE|URL")
    a.add_argument("--disabled", action="store_true", help="import without enabling")
    a.add_argument("--cafile", help="CA bundle for fetching the URL")
    up = nsub.add_parser("update", help="re-fetch bundles from their bundle_location")
    up.add_argument("name", nargs="?")
    up.add_argument("--cafile", help="CA bundle for fetching the URLs")
    ls = nsub.add_parser("list", help="list bundles (* = enabled)")
    ls.add_argument("--json", action="store_true")
    for name in ("enable", "disable", "remove"):
        p = nsub.add_parser(name, help=f"{name} a notary (by name or file name)")
        p.add_argument("name")
    k = sub.add_parser("cache", help="the local fingerprint cache")
    ksub = k.add_subparsers(dest="cache_cmd", required=True)
    kl = ksub.add_parser("list")
    kl.add_argument("--json", action="store_true")
    kc = ksub.add_parser("clear")
    kc.add_argument("target", nargs="?", metavar="HOST[:PORT]")
    return ap


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    handlers = {
        "check": cmd_check,
        "init": cmd_init,
        "notary": cmd_notary,
        "cache": cmd_cache,
        "verify-answer": cmd_verify_answer,
    }
    try:
        return handlers[args.cmd](args, out)
    except UsageError as e:
        print(f"converge: {e}", file=sys.stderr)
        return 2
    except ConvergeError as e:
        print(f"converge: error ({e.kind}): {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
