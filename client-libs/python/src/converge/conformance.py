"""The conformance CLI of the Python client (``python -m converge.conformance``).

Implements ``client-libs/conformance/CLIENT-CLI.md``:

    check --config-dir DIR HOST PORT FINGERPRINT   one JSON line; exit 0 trusted, 1 not, 2 error
    vector FILE                                    one JSON line per case
    info                                           one JSON line naming the implementation
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .client import Client
from .errors import ConvergeError
from .vectors import SCHEMAS, run_case

USAGE = (
    "usage: conformance check --config-dir DIR HOST PORT FINGERPRINT\n"
    "       conformance vector FILE\n"
    "       conformance info\n"
)


def _emit(obj: dict[str, Any], out: TextIO) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["info"] and len(args) == 1:
        _emit(
            {
                "language": "python",
                "implementation": "converge",
                "version": __version__,
                "schemas": list(SCHEMAS),
            },
            out,
        )
        return 0
    if args[:1] == ["vector"] and len(args) == 2:
        try:
            doc = json.loads(Path(args[1]).read_text())
        except (OSError, ValueError) as e:
            _emit({"error": "usage", "message": str(e)}, out)
            return 2
        if doc.get("schema") not in SCHEMAS:
            _emit({"error": "unsupported-schema", "schema": doc.get("schema")}, out)
            return 2
        for case in doc["tests"]:
            _emit(run_case(doc, case), out)
        return 0
    if args[:2] == ["check", "--config-dir"] and len(args) == 6:
        config_dir, host, port_text, fp = args[2:]
        try:
            if not port_text.isdigit():
                raise ValueError("PORT must be decimal")
            client = Client(config_dir)
            v = client.check(host, int(port_text), fp)
            client.close()
        except ConvergeError as e:
            _emit({"error": e.kind, "message": str(e)}, out)
            return 2
        except ValueError as e:
            _emit({"error": "usage", "message": str(e)}, out)
            return 2
        _emit(
            {
                "verdict": v.trusted,
                "cache": v.from_cache,
                "relay": v.relay,
                "notaries": [
                    {
                        "name": r.name,
                        "outcome": r.vote,
                        "kind": r.kind,
                        "status": r.status,
                        "protocol": r.protocol,
                    }
                    for r in v.results
                ],
            },
            out,
        )
        return 0 if v else 1
    sys.stderr.write(USAGE)
    return 2


if __name__ == "__main__":
    sys.exit(main())
