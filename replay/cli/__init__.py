"""``replay``: the command line, one module per subcommand (each with ``add_parser`` and
``run``): reproduce, synth, farm, workload, run, report, and rootstore
(:mod:`replay.rootstore.cli`).

Exit codes: 0 success, 1 an IO step failed, 2 bad input or usage.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from notary.errors import BadInput, NotaryError
from replay.errors import ReplayInputError, ReplayIOError

# subcommand -> its module (imported only when needed: ``replay workload`` does not pay for
# the TLS, plotting and notary imports of the others)
COMMANDS = {"reproduce": "replay.cli.reproduce", "synth": "replay.cli.synth",
            "farm": "replay.cli.farm", "workload": "replay.cli.workload",
            "run": "replay.cli.run", "report": "replay.cli.report",
            "rootstore": "replay.rootstore.cli", "overhead": "replay.overhead.cli"}

DESCRIPTION = (
    "Turn NetFlow traces into notary validation workloads, replay them open loop against "
    "notaries, and report the tables and figures of the 2014 Forced Perspectives study. "
    "Subcommands: reproduce (everything below in one command), synth, farm, workload, run, "
    "report, rootstore (the 2015 thesis's restricted-root-store study). Exit codes: "
    "0 success, 1 an IO step failed, 2 bad input or usage, 130 interrupted."
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``only``: with that subcommand alone (the others not imported)."""
    p = argparse.ArgumentParser(prog="replay", description=DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(module).add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    whole_process = argv is None  # the command line's own process, not a caller's
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv else None
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    args.whole_process = whole_process
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
