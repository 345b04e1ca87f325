"""The whole restricted-root-store pipeline on a synthetic world, end to end, reproducibly.

    python -m bench.rootstore.world [--sites 5000] [--roots 40] [--seed 5] [--out DIR]

Builds a world (``replay.rootstore.world``), serves it on loopback, scans every site the
way ``replay rootstore scan`` does (the notary's clean path), then runs ``replay rootstore
analyze`` (both organisation modes) and ``replay rootstore compare``. Outputs (CSV, JSON,
PNG) go to ``--out`` (default ``bench/rootstore/results/world``), but for the per-site
separating cases (``var/bulk/rootstore-world/``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.paths import bulk_path, keep_results, results_path
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import parse_ip
from notary.probe import TLSProber
from notary.resolve import Resolver
from replay.cli import main as replay_main
from replay.rootstore.scan import scan, write_line
from replay.rootstore.world import RootWorld

ROOT = Path(__file__).resolve().parents[2]
OUT = results_path("bench/rootstore/results/world")


async def _scan(world: RootWorld, out: Path, concurrency: int) -> dict[str, int]:
    farm = world.farm()
    port = await farm.start()
    try:
        ip = parse_ip("127.0.0.1")
        assert ip is not None
        hosts = [(h, port) for h in world.hosts()]
        prober = TLSProber(Resolver({h: [ip] for h, _ in hosts}, use_system=False),
                           AddressPolicy(parse_networks(["127.0.0.0/8"])), 10.0,
                           want_chain=True)
        with out.open("w", encoding="utf-8") as fh:
            return await scan(hosts, prober, concurrency, write_line(fh))
    finally:
        await farm.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rootstore.world")
    p.add_argument("--sites", type=int, default=5000)
    p.add_argument("--roots", type=int, default=40)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory(prefix="rootstore-world-") as tmp:
        world = RootWorld.build(Path(tmp) / "world", now, sites=args.sites, roots=args.roots,
                                seed=args.seed)
        args.out.mkdir(parents=True, exist_ok=True)
        chains = args.out / "scan.jsonl"
        t0 = time.perf_counter()
        counts = asyncio.run(_scan(world, chains, args.concurrency))
        print(f"scanned {args.sites} sites in {time.perf_counter() - t0:.1f} s: {counts}")
        roots = str(world.dir / "roots.pem")
        ts = str(int(now.timestamp()))
        common = ["--chains", str(chains), "--roots", roots, "--no-mozilla", "--now", ts]
        rc = replay_main(["rootstore", "analyze", *common, "--out", str(args.out / "analysis")])
        rc |= replay_main(["rootstore", "analyze", *common, "--org-mode", "label", "--out",
                           str(args.out / "analysis-label")])
        work = Path(tmp) / "compare"
        rc |= replay_main(["rootstore", "compare", *common, "--client-view",
                           str(world.dir / "client-view.jsonl"), "--k", "1,2,3,5,10,15,20,40",
                           "--out", str(work)])
        keep_results(work, args.out / "compare", bulk_path("rootstore-world/compare"))
        chains.unlink()  # large; reproducible from the seed
    return rc


if __name__ == "__main__":
    sys.exit(main())
