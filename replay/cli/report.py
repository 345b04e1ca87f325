"""``replay report``: tables and figures from a results file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from replay.errors import ReplayInputError
from replay.ingest import ErrorLog, stderr_emit


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    o = sub.add_parser("report", help="tables and figures from a results file",
                       description="The study's tables and plots from a results file.")
    o.add_argument("results", type=Path, help="results CSV from replay run")
    o.add_argument("-o", "--output", type=Path, required=True,
                   help="directory for the report (required)")
    o.add_argument("--stages", type=Path,
                   help="stage counts from replay workload, for the flow table (default: none)")
    o.add_argument("--inputs", type=Path,
                   help="synth.json of a synthetic trace: lists its inputs and marks the rows "
                   "they decide (default: none, every row measured)")
    o.add_argument("--no-plots", action="store_true", help="tables only (default: with PNGs)")
    o.add_argument("--strict", action="store_true",
                   help="stop at the first malformed results row (default: count and skip)")
    o.set_defaults(func=run)


def run(a: argparse.Namespace) -> int:
    from replay.report import build_report
    from replay.workload import read_stages

    stages = read_stages(a.stages) if a.stages else None
    synth = None
    if a.inputs:
        try:
            synth = json.loads(a.inputs.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReplayInputError(f"cannot read {a.inputs}: {exc}") from exc
    errors = ErrorLog(strict=a.strict, emit=stderr_emit)
    summary = build_report(a.results, a.output, stages, plots=not a.no_plots, errors=errors,
                           synth=synth)
    print(summary["text"])
    print(f"\nreport written to {a.output / 'report.md'} ({summary['requests']} requests, "
          f"{summary['client_hits']} client hits)", file=sys.stderr)
    return 0
