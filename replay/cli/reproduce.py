"""``replay reproduce``: the whole reproduction in one command."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    x = sub.add_parser("reproduce", help="the whole reproduction: every table side by side",
                       description="synth -> farm -> notary -> workload -> run -> report, "
                       "the restricted-root-store comparison and worlds, and the client cost; "
                       "prints every table of the study and the thesis beside ours.")
    x.add_argument("--out", type=Path, required=True, help="output directory (required)")
    x.add_argument("--scale", type=float, default=0.02,
                   help="size of the synthetic trace, 1.0 = the study's hour "
                   "(default: %(default)s)")
    x.add_argument("--duration", type=float, default=600.0,
                   help="seconds of trace (default: %(default)s)")
    x.add_argument("--speed", type=float, default=2.0,
                   help="replay speed factor (default: %(default)s)")
    x.add_argument("--seed", type=int, default=1, help="random seed (default: %(default)s)")
    x.add_argument("--world-sites", type=int, default=1500,
                   help="sites per root-store world (default: %(default)s)")
    x.add_argument("--worlds", default=None,
                   help="root popularity models of the worlds, comma-separated "
                   "(default: thesis,zipf:0.8,zipf:1.2,uniform; empty: none)")
    x.add_argument("--no-client-cost", action="store_true",
                   help="skip the client-cost benchmark of Table 4 (default: run it)")
    x.add_argument("--no-overhead", action="store_true",
                   help="skip the thesis's HTTPS overhead (replay overhead --quick; default: "
                   "run it)")
    x.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from replay.errors import ReplayInputError
    from replay.reproduce import WORLD_MODELS, ReproduceConfig, reproduce
    from replay.rootstore.world import root_weights

    worlds = tuple(m.strip() for m in a.worlds.split(",") if m.strip()) if a.worlds else ()
    for model in worlds:  # before any work: a bad model raises ReplayInputError (exit 2)
        root_weights(1, model)
    if a.world_sites < 1:
        raise ReplayInputError(f"--world-sites must be at least 1, got {a.world_sites}")
    cfg = ReproduceConfig(out=a.out, scale=a.scale, duration=a.duration, speed=a.speed,
                          seed=a.seed, world_sites=a.world_sites,
                          worlds=worlds if a.worlds is not None else WORLD_MODELS,
                          client_bench=not a.no_client_cost, overhead=not a.no_overhead)
    return reproduce(cfg)
