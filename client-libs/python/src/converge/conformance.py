"""The conformance CLI of the Python client (``python -m converge.conformance``).

Implements ``client-libs/conformance/CLIENT-CLI.md``:

    check --config-dir DIR HOST PORT FINGERPRINT   one JSON line; exit 0 trusted, 1 not, 2 error
    hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT
                                                   GET https://HOST:PORT/ through the TLS hook
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
    "       conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] HOST PORT\n"
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
    if args[:2] == ["hook", "--config-dir"] and len(args) >= 5:
        return _hook(args[2], args[3:], out)
    sys.stderr.write(USAGE)
    return 2


HOOK_BODY_BYTES = 1024


def _caused_by(exc: BaseException, cls: type[BaseException]) -> bool:
    """Whether ``cls`` is anywhere in ``exc``'s chain (causes, contexts, and the exceptions
    that requests and urllib3 wrap in their arguments or ``reason``)."""
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        if isinstance(e, cls):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
    return False


def _hook(config_dir: str, rest: list[str], out: TextIO) -> int:
    """``hook``: GET https://HOST:PORT/ with :func:`converge.tls.requests_session`."""
    import requests

    from .errors import NotTrusted
    from .tls import requests_session

    opts: dict[str, str] = {}
    while rest[:1] in (["--proxy"], ["--ca-file"]) and len(rest) >= 2:
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    if len(rest) != 2 or not rest[1].isdigit():
        sys.stderr.write(USAGE)
        return 2
    host, port = rest[0], int(rest[1])
    try:
        client = Client(config_dir)
    except ConvergeError as e:
        _emit({"error": e.kind, "message": str(e)}, out)
        return 2
    authority = f"[{host}]" if ":" in host else host
    with client, requests_session(client) as session:
        session.trust_env = False  # no environment proxies: --proxy only
        if "--ca-file" in opts:
            session.verify = opts["--ca-file"]
        proxy = opts.get("--proxy")
        try:
            r = session.get(
                f"https://{authority}:{port}/",
                proxies={"https": proxy} if proxy else None,
                timeout=client.config.total_timeout + 10,
            )
        except requests.exceptions.RequestException as e:
            kind = "untrusted" if _caused_by(e, NotTrusted) else "io"
            _emit({"connected": False, "error": kind, "message": str(e)}, out)
            return 1
        except ConvergeError as e:
            _emit({"error": e.kind, "message": str(e)}, out)
            return 2
        body = r.content[:HOOK_BODY_BYTES].decode("utf-8", "replace")
        _emit({"connected": True, "status": r.status_code, "body": body}, out)
        return 0


if __name__ == "__main__":
    sys.exit(main())
