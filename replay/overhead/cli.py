"""``replay overhead``: the thesis's HTTPS overhead over emulated network paths."""

from __future__ import annotations

import argparse
from pathlib import Path

from replay.overhead.profiles import PROFILES


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    x = sub.add_parser(
        "overhead", help="HTTPS overhead: whole-page https - http over emulated paths",
        description="Whole-page downloads over http and https (TLS 1.2, 1.3, resumption; "
        "non-persistent and persistent HTTP/1.1, 6 connections per host; HTTP/2; HTTP/3 "
        "over a UDP path emulator with the same profiles) through toxiproxy "
        "path profiles; writes OUT/overhead.json and OUT/overhead.md beside the 2015 "
        "thesis's figures.")
    x.add_argument("--out", type=Path, required=True, help="output directory (required)")
    x.add_argument("--profiles", default="thesis,lan,transatlantic,mobile",
                   help=f"comma-separated path profiles ({', '.join(PROFILES)}; "
                   "default: %(default)s)")
    x.add_argument("--quick", action="store_true",
                   help="a small page (24 objects), 3 rounds (under 3 minutes)")
    x.add_argument("--repeats", type=int, default=0,
                   help="measured rounds per profile and mode (default: 3 quick, 15 full)")
    x.add_argument("--redirects", type=int, default=-1,
                   help="redirect hops before the page, each to another host (page.test -> "
                   "www.page.test), over http and https alike (default: 1, the thesis's "
                   "sites'; 0: none)")
    x.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    x.add_argument("--api-port", type=int, default=0,
                   help="toxiproxy's API port on 127.0.0.1 (default: a free one)")
    x.add_argument("--table4", action="store_true",
                   help="also the 2014 study's Table 4: converge() of the Python client "
                   "against 1, 3 and 8 real notaries over emulated paths (about a minute)")
    x.add_argument("--browser", action="store_true",
                   help="also a real headless Firefox's page loads over http and https on "
                   "the thesis profile (or the first), beside the Python client's")
    x.add_argument("--record", type=Path, default=None,
                   help="also write the figures without the per-load samples to this file "
                   "(e.g. bench/results/overhead.json)")
    x.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from replay.overhead.experiment import OverheadConfig, run_overhead
    from replay.overhead.profiles import get_profiles
    from replay.overhead.report import summary

    cfg = OverheadConfig(out=a.out, profiles=tuple(get_profiles(a.profiles)), quick=a.quick,
                         repeats=a.repeats, seed=a.seed, api_port=a.api_port,
                         table4=a.table4, redirects=a.redirects, browser=a.browser)
    doc = run_overhead(cfg)
    print(summary(doc))
    if a.record is not None:
        import json

        from replay.overhead.report import compact

        a.record.write_text(json.dumps(compact(doc), indent=2) + "\n")
    print(f"\nwritten: {a.out / 'overhead.json'}, {a.out / 'overhead.md'}")
    return 0
