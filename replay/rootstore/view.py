"""What clients of a prepared target farm were shown, as a client-view file for
``replay rootstore compare`` (docs/rootstore.md), and the host list for ``replay rootstore scan``.

For every site in ``<state>/targets.csv``: the chain its clients were shown (``client`` in
``sites.json``): the chain the farm serves, except for the ``mitm`` roles, whose clients
were shown a forged chain while the farm, the notary's clean path, serves the genuine one.
``dead`` sites have no chain and are left out of the view (a scan reports them
unreachable). ``rotating`` sites show their first certificate, as the targets list does.

    replay rootstore view STATE [-o client-view.jsonl] [--hosts hosts.txt]
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from replay.errors import ReplayInputError, ReplayIOError
from replay.workload import read_target_roles, read_targets

MAX_CHAIN_FILE = 64 * 1024


def _chain(path: Path) -> list[str]:
    try:
        if path.stat().st_size > MAX_CHAIN_FILE:
            raise ReplayInputError(f"{path} is larger than {MAX_CHAIN_FILE} bytes")
        certs = x509.load_pem_x509_certificates(path.read_bytes())
    except OSError as exc:
        raise ReplayIOError(f"cannot read {path}: {exc}") from exc
    except ValueError as exc:
        raise ReplayInputError(f"{path}: not PEM certificates ({exc})") from exc
    return [base64.b64encode(c.public_bytes(Encoding.DER)).decode("ascii") for c in certs]


def client_view(state: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(client-view lines, ``host:port`` scan lines) for a prepared farm state."""
    targets = read_targets(state / "targets.csv")
    roles = read_target_roles(state / "targets.csv")
    try:
        sites: dict[str, Any] = json.loads((state / "sites.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplayIOError(f"{state}: not a prepared farm ({exc})") from exc
    view: list[dict[str, Any]] = []
    scan: list[str] = []
    for host, target in targets.items():
        scan.append(f"{host}:{target.port}")
        role = roles.get(host, "")
        site = sites.get(host)
        if role == "dead" or site is None:
            continue
        certs = state / "certs"
        path = certs / str(site.get("client") or site["files"][0])
        view.append({"host": host, "port": target.port, "role": role,
                     "chain": _chain(path)})
    return view, scan


__all__ = ["client_view"]
