"""``replay rootstore {scan,analyze,topk,compare,verify,world,serve,view}`` (docs/rootstore.md).

The study's command line: it uses the notary as a library (its prober, name resolution,
stores and CA verifier) and is never imported by it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import datetime as dt
import hashlib
import json
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives.serialization import Encoding

from notary.ca.stores import full_store, read_fingerprint_list, read_pem_bundle
from notary.ca.verify import RootStore, verify_chain
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.errors import BadConfig, BadData
from replay.rootstore.analysis import (
    MAX_K,
    OrgMode,
    SiteChain,
    attribute,
    coverage,
    intermediate_pool,
    merge_by_org,
    org_key,
    popularity,
    privatesuffix_function,
    unevaluable,
    verdict_counts,
)
from replay.rootstore.compare import Observed, SiteRequests, compare, scores
from replay.rootstore.report import Analysis, format_comparison, write_analysis, write_comparison
from replay.rootstore.scan import parse_hosts, read_chains, scan, write_line

MAX_STORED_CHAINS = 1_000_000


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``replay rootstore`` and its subcommands."""
    r = sub.add_parser("rootstore", help="the restricted-root-store study: scan, root "
                       "popularity, top-k coverage, CA vs perspectives, synthetic worlds",
                       description="The 2015 thesis's restricted-root-store comparison "
                       "(docs/rootstore.md).")
    rsub = r.add_subparsers(dest="rootstore_command", required=True)
    r.set_defaults(func=run)

    s = rsub.add_parser("scan", help="fetch the chains a list of hosts presents (JSONL)")
    s.add_argument("--hosts", type=Path, required=True, help="host[:port] per line")
    s.add_argument("--resolve", action="append", default=[], metavar="NAME=IP",
                   help="static name map entry, repeatable (default: none)")
    s.add_argument("--hosts-file", type=Path, help="static name map: 'IP name...' lines")
    s.add_argument("--concurrency", type=int, default=32,
                   help="handshakes at once (default: %(default)s)")
    s.add_argument("--timeout", type=float, default=5.0,
                   help="seconds per host (default: %(default)s)")
    s.add_argument("-o", "--output", type=Path, help="JSONL file (default stdout)")

    def common(p: argparse.ArgumentParser, chains_required: bool = True) -> None:
        src = p.add_mutually_exclusive_group(required=chains_required)
        src.add_argument("--chains", type=Path, help="chains JSONL (from replay rootstore scan)")
        src.add_argument("--db", type=Path, help="a notary's SQLite store (its chains)")
        src.add_argument("--redis", metavar="URL", help="a notary's Redis store (its chains)")
        p.add_argument("--redis-prefix", default="converge:",
                       help="Redis key prefix (default: %(default)s)")
        p.add_argument("--roots", type=Path, action="append", default=[], metavar="PEM",
                       help="more roots for the full store, repeatable (default: none)")
        p.add_argument("--no-mozilla", action="store_true",
                       help="the full store is only --roots, not Mozilla's (certifi)")
        p.add_argument("--now", type=int, help="validation time, Unix seconds (default now)")

    a = rsub.add_parser("analyze", help="popularity table, coverage curves, CSV and PNG")
    common(a)
    a.add_argument("--org-mode", choices=["registrable", "label"], default="registrable",
                   help="how sites are merged into organisations: the registrable domain "
                   "(public suffix list) or the label left of it (default: %(default)s)")
    a.add_argument("--max-k", type=int, default=MAX_K,
                   help="longest coverage curve, in roots (default: %(default)s)")
    a.add_argument("--out", type=Path, required=True, help="output directory")
    a.add_argument("--world", type=Path,
                   help="world.json of a synthetic world (replay rootstore world): its root "
                   "popularity model is stated beside the curve (default: real data)")

    t = rsub.add_parser("topk", help="write the k most popular roots' SHA-256 fingerprints")
    common(t)
    t.add_argument("--k", type=int, required=True, help="how many roots (required)")
    t.add_argument("-o", "--output", type=Path, help="file (default stdout)")

    v = rsub.add_parser("verify", help="verify one PEM chain (leaf first) for a host")
    v.add_argument("--chain", type=Path, required=True, help="PEM file, leaf first")
    v.add_argument("--host", required=True, help="the host name to verify for (required)")
    v.add_argument("--roots", type=Path, action="append", default=[], metavar="PEM",
                   help="more trusted roots, repeatable (default: none)")
    v.add_argument("--no-mozilla", action="store_true",
                   help="trust only --roots, not Mozilla's store (default: Mozilla's too)")
    v.add_argument("--trust", type=Path, help="restrict to these root SHA-256 fingerprints")
    v.add_argument("--now", type=int, help="validation time, Unix seconds (default now)")

    c = rsub.add_parser("compare", help="agreement of perspectives, full CA and top-k CA")
    common(c)
    c.add_argument("--client-view", type=Path, required=True,
                   help="JSONL of the chains clients were shown (host, port, chain, role)")
    c.add_argument("--ranking", type=Path, help="root SHA-256 list, most popular first "
                   "(default: popularity among the notary's chains)")
    c.add_argument("--k", default="1,2,3,5,10,15,20",
                   help="comma-separated k values (default: %(default)s)")
    c.add_argument("--detail-k", type=int, help="k for the separating cases (default 10)")
    c.add_argument("--requests", type=Path,
                   help="CSV host,port,requests[,perspective_accepts] (replay report's "
                   "per-site.csv): weight the catches, misses and false alarms by how often "
                   "clients validated each site, perspectives by the notary's own answers")
    c.add_argument("--out", type=Path, required=True, help="output directory")

    w = rsub.add_parser("world", help="build a synthetic web PKI world (roots, sites, "
                        "client view)")
    w.add_argument("dir", type=Path, help="world directory to write")
    w.add_argument("--sites", type=int, default=1000, help="sites (default: %(default)s)")
    w.add_argument("--roots", type=int, default=20, help="public roots (default: %(default)s)")
    w.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    w.add_argument("--port", type=int, default=443,
                   help="port written in hosts.txt (default: %(default)s)")
    w.add_argument("--popularity", default="thesis",
                   help="root popularity model: thesis (Table 3's counts), zipf:S or uniform "
                   "(default: %(default)s)")

    sv = rsub.add_parser("serve", help="serve a world's chains over TLS on 127.0.0.1 (by SNI)")
    sv.add_argument("dir", type=Path, help="world directory (from replay rootstore world)")
    sv.add_argument("--port", type=int, default=18453, help="TLS port (default: %(default)s)")
    sv.add_argument("--seconds", type=float, default=3600.0,
                    help="stop after this many seconds, at most a day (default: %(default)s)")

    vw = rsub.add_parser("view", help="client view and scan list of a prepared target farm")
    vw.add_argument("state", type=Path, help="a prepared farm state directory")
    vw.add_argument("-o", "--output", type=Path, help="client view JSONL (default stdout)")
    vw.add_argument("--hosts", type=Path,
                    help="also write host:port lines for replay rootstore scan")


def _now(args: argparse.Namespace) -> int:
    return int(args.now) if args.now is not None else int(time.time())


def _store(args: argparse.Namespace) -> RootStore:
    return full_store(list(args.roots), mozilla=not args.no_mozilla)


async def _stored_chains(args: argparse.Namespace) -> list[SiteChain]:
    from notary.store.base import StoredChain

    stored: list[StoredChain]
    if args.redis is not None:
        from notary.store.redis import RedisStore

        rstore = RedisStore.from_url(args.redis, prefix=args.redis_prefix, timeout=5.0)
        try:
            stored = await rstore.chains(MAX_STORED_CHAINS)
        finally:
            await rstore.close()
    else:
        from notary.store.sqlite import SQLiteStore

        if not args.db.exists():
            raise BadConfig(f"no database at {args.db}")
        store = await SQLiteStore.open(args.db)
        try:
            stored = await store.chains(MAX_STORED_CHAINS)
        finally:
            await store.close()
    latest: dict[str, tuple[int, tuple[bytes, ...]]] = {}
    for c in stored:  # one chain per target: the most recently seen
        if "/" in c.location:
            continue  # seen at an address a client named, not on the notary's own path
        if c.location not in latest or c.seen >= latest[c.location][0]:
            latest[c.location] = (c.seen, c.chain)
    out = []
    for location, (_, chain) in sorted(latest.items()):
        host, _, port = location.rpartition(":")
        out.append(SiteChain(host.removeprefix("[").removesuffix("]"), int(port), chain))
    return out


def _chains(args: argparse.Namespace) -> tuple[list[SiteChain], int]:
    if args.db is not None or args.redis is not None:
        return asyncio.run(_stored_chains(args)), 0
    return read_chains(args.chains)


def cmd_scan(args: argparse.Namespace) -> int:
    from notary.config import Settings
    from notary.probe import TLSProber
    from notary.web import build_resolver

    try:
        text = args.hosts.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadConfig(f"cannot read {args.hosts}: {exc}") from exc
    hosts = parse_hosts(text)
    if args.timeout <= 0 or args.timeout > 60:
        raise BadConfig("--timeout must be in (0, 60] seconds")
    resolver = build_resolver(Settings(resolve=args.resolve, hosts_file=args.hosts_file))
    # A measurement tool run by its operator, like `notary check`: every address is allowed.
    policy = AddressPolicy(parse_networks(["0.0.0.0/0", "::/0"]))
    prober = TLSProber(resolver, policy, args.timeout, want_chain=True)
    fh = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        counts = asyncio.run(scan(hosts, prober, args.concurrency, write_line(fh)))
    finally:
        if args.output:
            fh.close()
    print(f"scanned {len(hosts)} hosts: {counts['ok']} chains, {counts['failed']} failed",
          file=sys.stderr)
    return 0


def _analysis(args: argparse.Namespace) -> Analysis:
    sites, without = _chains(args)
    if not sites:
        raise BadData("no chains to analyse")
    now = _now(args)
    full = _store(args)
    results = attribute(sites, full, now, intermediate_pool(sites))
    table = popularity(results)
    psl = privatesuffix_function()
    mode: OrgMode = "label" if args.org_mode == "label" else "registrable"
    merged = merge_by_org(results, lambda h: org_key(h, psl, mode))
    org_table = popularity(merged)
    max_k = max(1, min(args.max_k, 1000))
    model = None
    if args.world is not None:
        try:
            model = str(json.loads(args.world.read_text(encoding="utf-8"))
                        .get("popularity", "thesis"))
        except (OSError, ValueError, AttributeError) as exc:
            raise BadConfig(f"cannot read {args.world}: {exc}") from exc
    return Analysis(now, full.name, len(sites), without, verdict_counts(results), table,
                    org_table, coverage(table, max_k), coverage(org_table, max_k),
                    len(merged), mode, unevaluable(results), model)


def cmd_analyze(args: argparse.Namespace) -> int:
    a = _analysis(args)
    files = write_analysis(a, args.out)
    s = a.summary()
    print(f"{a.sites} sites with chains, {s['valid_sites']} valid under {a.store}, "
          f"{len(a.table)} roots used, {a.organisations} organisations")
    if a.unevaluable:
        print(f"{a.unevaluable} sites could not be evaluated (a malformed certificate or a "
              "host name the web-PKI rules cannot express); counted as bad-chain or "
              "wrong-host in verdicts.csv")
    for row in a.table[:10]:
        print(f"{row.rank:>3} {row.sites:>7} {row.share:7.1%} {row.cumulative:7.1%}  {row.name}")
    cov = s["coverage"]
    print("coverage top-1/5/10: " + " / ".join(
        f"{cov[f'top_{k}']:.1%}" if cov[f"top_{k}"] is not None else "-" for k in (1, 5, 10)))
    print(f"\n{'measure':<42} {'ours':>7}  {'thesis':<16} basis")
    for measure, ours, thesis, basis in a.side_by_side():
        print(f"{measure:<42} {ours:>7}  {thesis:<16} {basis}")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def cmd_topk(args: argparse.Namespace) -> int:
    if args.k < 1:
        raise BadConfig("--k must be at least 1")
    sites, _ = _chains(args)
    table = popularity(attribute(sites, _store(args), _now(args)))
    lines = [f"{r.sha256.hex()}  # {r.rank} {r.name} ({r.sites} sites)" for r in table[: args.k]]
    text = "\n".join(lines) + "\n"
    if args.output:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise BadConfig(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(text)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        ks = sorted({int(k) for k in args.k.split(",") if k.strip()})
    except ValueError as exc:
        raise BadConfig("--k expects comma-separated integers") from exc
    if not ks or ks[0] < 1 or len(ks) > 200:
        raise BadConfig("--k needs 1 to 200 values, each at least 1")
    now = _now(args)
    full = _store(args)
    notary_sites, _ = _chains(args)
    seen = {(s.host, s.port): s for s in notary_sites}
    by_host: dict[str, list[SiteChain]] = {}
    for s in notary_sites:
        by_host.setdefault(s.host, []).append(s)
    view, _ = read_chains(args.client_view)
    labels = _labels(args.client_view)
    if args.ranking is not None:
        ranking = read_fingerprint_list(args.ranking)
    else:
        ranking = [r.sha256 for r in popularity(attribute(notary_sites, full, now))]
    observed = []
    for v in view:
        mine = seen.get((v.host, v.port))
        if mine is None and len(by_host.get(v.host, ())) == 1:
            mine = by_host[v.host][0]  # the same site scanned on another port (a test farm)
        observed.append(Observed(
            v.host, v.port, v.chain,
            hashlib.sha256(mine.chain[0]).digest() if mine is not None else None,
            labels.get((v.host, v.port), "")))
    result = compare(observed, full, ranking, ks, now)
    detail = args.detail_k if args.detail_k is not None else (10 if 10 in ks else ks[-1])
    weights = read_site_requests(args.requests) if args.requests is not None else None
    sc = scores(result, detail, weights) if detail in ks else None
    files = write_comparison(result, args.out, detail, sc)
    print(format_comparison(result, detail, sc))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


MAX_REQUEST_ROWS = 2_000_000


def read_site_requests(path: Path) -> dict[tuple[str, int], SiteRequests]:
    """``host,port,requests[,perspective_accepts]`` rows (a header line first)."""
    out: dict[tuple[str, int], SiteRequests] = {}
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or not {"host", "port", "requests"} <= set(
                    reader.fieldnames):
                raise BadConfig(f"{path}: needs the columns host, port, requests")
            for n, row in enumerate(reader, 2):
                if n > MAX_REQUEST_ROWS:
                    raise BadConfig(f"{path}: more than {MAX_REQUEST_ROWS} rows")
                try:
                    acc = row.get("perspective_accepts")
                    out[(row["host"].lower(), int(row["port"]))] = SiteRequests(
                        int(row["requests"]), int(acc) if acc not in (None, "") else None)
                except (ValueError, TypeError, AttributeError) as exc:
                    raise BadConfig(f"{path}:{n}: {exc}") from exc
    except OSError as exc:
        raise BadConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
    return out


def _labels(path: Path) -> dict[tuple[str, int], str]:
    """The ``role`` (or ``label``) of each client-view site; lines were checked already."""
    out: dict[tuple[str, int], str] = {}
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    try:
                        doc = json.loads(line)
                        out[(str(doc["host"]).lower(), int(doc.get("port", 443)))] = str(
                            doc.get("role") or doc.get("label") or "")
                    except (ValueError, KeyError, TypeError, AttributeError):
                        continue
    except OSError as exc:
        raise BadConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
    return out


def cmd_verify(args: argparse.Namespace) -> int:
    """Print the verdict as JSON; exit 0 when the chain is accepted, 1 when it is not."""
    certs = read_pem_bundle(args.chain)
    chain = tuple(c.public_bytes(Encoding.DER) for c in certs)
    store = _store(args)
    if args.trust is not None:
        store = store.restrict(read_fingerprint_list(args.trust), f"{store.name}/trusted")
    verdict = verify_chain(chain, args.host, _now(args), store)
    print(json.dumps(verdict.to_json()))
    return 0 if verdict.ok else 1


def cmd_world(args: argparse.Namespace) -> int:
    from replay.rootstore.world import RootWorld

    world = RootWorld.build(args.dir, dt.datetime.now(dt.UTC), sites=args.sites,
                            roots=args.roots, seed=args.seed, port=args.port,
                            popularity=args.popularity)
    print(json.dumps(world.manifest()["roles"]))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from replay.rootstore.world import RootWorld

    async def serve() -> None:
        farm = RootWorld(args.dir).farm(port=args.port)
        port = await farm.start()
        print(f"serving {args.dir} on 127.0.0.1:{port}", flush=True)
        try:
            await asyncio.sleep(max(0.0, min(args.seconds, 86_400.0)))
        finally:
            await farm.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from replay.rootstore.view import client_view

    view, hosts = client_view(args.state)
    text = "".join(json.dumps(v) + "\n" for v in view)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.hosts:
        args.hosts.write_text("".join(f"{h}\n" for h in hosts), encoding="utf-8")
    return 0


def run(args: argparse.Namespace) -> int:
    handler = {"scan": cmd_scan, "analyze": cmd_analyze, "topk": cmd_topk,
               "compare": cmd_compare, "verify": cmd_verify, "world": cmd_world,
               "serve": cmd_serve, "view": cmd_view}
    return handler[args.rootstore_command](args)


__all__ = ["add_parser", "run"]
