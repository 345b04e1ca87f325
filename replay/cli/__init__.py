"""``replay``: the command line, one module per subcommand (each with ``add_parser`` and
``run``): reproduce, synth, farm, workload, run, report, and rootstore
(:mod:`replay.rootstore.cli`).

Exit codes: 0 success, 1 an IO step failed, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from notary.errors import BadInput, NotaryError
from replay.cli import farm, report, reproduce, run, synth, workload
from replay.errors import ReplayInputError, ReplayIOError
from replay.overhead import cli as overhead
from replay.rootstore import cli as rootstore

DESCRIPTION = (
    "Turn NetFlow traces into notary validation workloads, replay them open loop against "
    "notaries, and report the tables and figures of the 2014 Forced Perspectives study. "
    "Subcommands: reproduce (everything below in one command), synth, farm, workload, run, "
    "report, rootstore (the 2015 thesis's restricted-root-store study). Exit codes: "
    "0 success, 1 an IO step failed, 2 bad input or usage, 130 interrupted."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="replay", description=DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)
    for command in (reproduce, synth, farm, workload, run, report, rootstore, overhead):
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ReplayInputError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return 2
    except BadInput as exc:  # the notary's own checks, where the study uses it as a library
        print(f"replay: error: {exc.message}", file=sys.stderr)
        return 2
    except NotaryError as exc:
        print(f"replay: failed: {exc.message}", file=sys.stderr)
        return 1
    except ReplayIOError as exc:
        print(f"replay: failed: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"replay: failed: {exc}", file=sys.stderr)
        return 1
