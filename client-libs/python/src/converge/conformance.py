"""The conformance CLI of the Python client (``python -m converge.conformance``).

Implements ``client-libs/conformance/CLIENT-CLI.md``:

    check --config-dir DIR HOST PORT FINGERPRINT   one JSON line; exit 0 trusted, 1 not, 2 error
    hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P] [--follow-redirects]
         [--first URL] [--unhooked-first] HOST PORT
                                                   GET https://HOST:PORT/P through the TLS hook
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
    "       conformance hook --config-dir DIR [--proxy URL] [--ca-file PEM] [--path P]\n"
    "                        [--follow-redirects] [--first URL] [--unhooked-first] HOST PORT\n"
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


HOOK_FLAGS = {"--proxy": 1, "--ca-file": 1, "--path": 1, "--first": 1,
              "--follow-redirects": 0, "--unhooked-first": 0}


def _hook(config_dir: str, rest: list[str], out: TextIO) -> int:
    """``hook``: GET https://HOST:PORT/PATH with :func:`converge.tls.requests_session`
    (redirects followed by requests itself with ``--follow-redirects``; ``--first`` on the
    same session; ``--unhooked-first`` on a plain session, the only way code without the hook
    reaches the network here: a hooked session's adapters are all hooked)."""
    import requests

    from .errors import NotTrusted
    from .tls import requests_session

    opts: dict[str, str] = {}
    while rest[:1] and rest[0] in HOOK_FLAGS and len(rest) > HOOK_FLAGS[rest[0]]:
        opts[rest[0]] = rest[1] if HOOK_FLAGS[rest[0]] else ""
        rest = rest[1 + HOOK_FLAGS[rest[0]]:]
    path = opts.get("--path", "/")
    if len(rest) != 2 or not rest[1].isdigit() or not path.startswith("/"):
        sys.stderr.write(USAGE)
        return 2
    host, port = rest[0], int(rest[1])
    try:
        client = Client(config_dir)
    except ConvergeError as e:
        _emit({"error": e.kind, "message": str(e)}, out)
        return 2
    authority = f"[{host}]" if ":" in host else host
    url = f"https://{authority}:{port}{path}"
    proxy = opts.get("--proxy")
    proxies = {"https": proxy} if proxy else None
    verify: str | bool = opts.get("--ca-file", True)
    timeout = client.config.total_timeout + 10
    with client, requests_session(client) as session, requests.Session() as plain:
        session.trust_env = plain.trust_env = False  # no environment proxies: --proxy only
        session.verify = plain.verify = verify
        step = "first request: "
        try:
            if "--unhooked-first" in opts:
                plain.get(url, proxies=proxies, timeout=timeout).close()
            if "--first" in opts:
                session.get(opts["--first"], proxies=proxies, timeout=timeout,
                            allow_redirects=False).close()
            step = ""
            r = session.get(url, proxies=proxies, timeout=timeout,
                            allow_redirects="--follow-redirects" in opts)
        except requests.exceptions.RequestException as e:
            kind = "untrusted" if _caused_by(e, NotTrusted) else "io"
            _emit({"connected": False, "error": kind, "message": step + str(e)}, out)
            return 1
        except ConvergeError as e:
            _emit({"error": e.kind, "message": str(e)}, out)
            return 2
        body = r.content[:HOOK_BODY_BYTES].decode("utf-8", "replace")
        _emit({"connected": True, "status": r.status_code, "body": body}, out)
        return 0


if __name__ == "__main__":
    sys.exit(main())
