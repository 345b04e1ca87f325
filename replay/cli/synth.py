"""``replay synth``: generate a synthetic university hour of flows."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    s.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from replay.synth import SynthConfig, SyntheticTrace, write_synthetic

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
