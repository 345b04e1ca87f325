"""Every parser the notary, the client and replay expose to untrusted bytes, as one table.

Each entry maps an input (``bytes``) to a call of the parser and names the error family the
parser is allowed to raise: the notary's ``BadInput``, the client's ``BadInput`` or replay's
``ReplayInputError``. Anything else escaping (``RecursionError``, ``KeyError``,
``UnicodeError``, ...) is a crash. The same table drives the hypothesis properties in
``tests/security/test_hostile_input.py`` and the atheris fuzzer in ``fuzz/run.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from notary.errors import BadInput as NotaryBadInput

Parser = Callable[[bytes], object]


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _target(data: bytes) -> object:
    from notary.core.target import parse_target_path

    return parse_target_path(_text(data))


def _fingerprint(data: bytes) -> object:
    from notary.core.fingerprint import parse_fingerprint

    return parse_fingerprint(_text(data))


def _form(data: bytes) -> object:
    from notary.core.request import parse_form_fingerprint

    return parse_form_fingerprint(data)


def _ext_request(data: bytes) -> object:
    from notary.core.extended import parse_request

    return parse_request(data)


def _legacy_body(data: bytes) -> object:
    from notary.core.legacy import reserialise_without_signature, split_body

    for parse in (split_body, reserialise_without_signature):
        with contextlib.suppress(NotaryBadInput):
            parse(data)
    return None


def _relay_head(data: bytes) -> object:
    from notary.relay import parse_connect

    return parse_connect(data)


def _hosts_file(data: bytes) -> object:
    from notary.resolve import parse_hosts_text

    return parse_hosts_text(_text(data))


def _resolve_option(data: bytes) -> object:
    from notary.resolve import parse_resolve_option

    return parse_resolve_option(_text(data))


def _listen(data: bytes) -> object:
    from notary.config import parse_listen

    return parse_listen(_text(data))


def _with_file(data: bytes, suffix: str, use: Callable[[Path], object]) -> object:
    with tempfile.NamedTemporaryFile(suffix=suffix) as f:
        f.write(data)
        f.flush()
        return use(Path(f.name))


def _config_file(data: bytes) -> object:
    from notary.config import Settings, load_toml

    def use(path: Path) -> object:
        settings = Settings(**load_toml(path))
        settings.check()
        return settings

    return _with_file(data, ".toml", use)


_SIGNING_DIR: list[Path] = []


def _retired_keys_file(data: bytes) -> object:
    """``signing-retired.json`` beside the signing key, read by ``notary bundle``."""
    from notary import keys

    if not _SIGNING_DIR:
        d = Path(tempfile.mkdtemp(prefix="fuzz-signing-"))
        keys.ensure_signing_key(d / "signing.key")
        _SIGNING_DIR.append(d)
    d = _SIGNING_DIR[0]
    (d / keys.RETIRED_FILE).write_bytes(data)
    return keys.bundle_signing_keys(d / "signing.key", now=1_700_000_000)


# -- client ---------------------------------------------------------------------------------


def _client_bundle(data: bytes) -> object:
    from converge.bundle import parse_bundle

    return parse_bundle(data)


def _client_config(data: bytes) -> object:
    from converge.config import parse_config
    from converge.errors import ConfigError

    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ConfigError("not JSON") from exc  # the loader's own translation
    if not isinstance(raw, dict):
        raise ConfigError("not an object")
    return parse_config(Path(tempfile.gettempdir()), raw)


def _client_config_file(data: bytes) -> object:
    from converge.config import load_config

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "converge.config").write_bytes(data)
        return load_config(d)


def _client_response(data: bytes) -> object:
    from converge.legacy import parse_http_response, verify_body

    resp = parse_http_response(data)
    return verify_body(resp.body, _client_key())


def _client_body(data: bytes) -> object:
    """A legacy body's framing, then the input as signed bytes whose signature verified."""
    from converge.errors import BadInput
    from converge.legacy import parse_signed, split_body

    with contextlib.suppress(BadInput):
        split_body(data)
    return parse_signed(data)


def _client_answer(data: bytes) -> object:
    """An extended answer, then the input as a statement whose signature verified."""
    from converge.extended import AnswerRejected, parse_statement, verify_answer

    with contextlib.suppress(AnswerRejected):
        verify_answer(data, {"980c6b60ee6bd9a8": _client_ed25519_key()})
    return parse_statement("980c6b60ee6bd9a8", data)


def _client_outcome(data: bytes) -> object:
    from converge.fingerprint import parse_fingerprint
    from converge.legacy import outcome_from_http

    fp = parse_fingerprint("AA" * 20)
    return outcome_from_http(data, [fp], _client_key())


_KEY: list[object] = []
_ED25519: list[Any] = []


def _client_ed25519_key() -> Any:
    if not _ED25519:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        _ED25519.append(Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key())
    return _ED25519[0]


def _client_key() -> object:
    if not _KEY:
        from cryptography.hazmat.primitives.asymmetric import rsa

        _KEY.append(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
    return _KEY[0]


# -- replay ---------------------------------------------------------------------------------


def _flow_csv(data: bytes) -> object:
    from replay.ingest import ErrorLog, read_csv_file

    def use(path: Path) -> object:
        return list(read_csv_file(path, ErrorLog()))

    return _with_file(data, ".csv", use)


def _flow_fields(data: bytes) -> object:
    from replay import flows

    text = _text(data)
    for parse in (flows.parse_time, flows.parse_duration, flows.parse_proto, flows.parse_port,
                  flows.parse_count, flows.parse_address, flows.parse_hostname):
        with contextlib.suppress(ValueError):  # their contract; the file reader wraps it
            parse(text)
    return None


def _replay_errors() -> type[Exception]:
    from replay.errors import ReplayInputError

    return ReplayInputError


class _NeverRaised(Exception):
    """The error family of a function that must return for every input."""


_CA_CHAIN: list[object] = []


def _ca_verify(data: bytes) -> object:
    """The CA verifier on a valid chain whose leaf has one extension's bytes replaced by the
    input (``data[0]`` picks the extension): it must return a verdict, never raise."""
    import datetime as dt

    from certmut import make_chain, with_extension_value

    from notary.ca.verify import CAVerdict, RootStore, verify_chain

    if not _CA_CHAIN:
        now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        chain = make_chain("fuzz.test", now)
        _CA_CHAIN.extend([chain, RootStore("fuzz", [chain.root]), int(now.timestamp())])
    chain, store, now_ts = _CA_CHAIN
    leaf = with_extension_value(chain, data[:2048])  # type: ignore[arg-type]
    verdict = verify_chain((leaf, chain.root_der), "fuzz.test", now_ts,  # type: ignore[attr-defined]
                           store)  # type: ignore[arg-type]
    if not isinstance(verdict, CAVerdict):
        raise TypeError("verify_chain returned no verdict")
    return verdict


def _client_errors() -> type[Exception]:
    from converge.errors import BadInput

    return BadInput


# name -> (parser, allowed error family, kind of input)
PARSERS: dict[str, tuple[Parser, Callable[[], type[Exception]], str]] = {
    "notary target path": (_target, lambda: NotaryBadInput, "text"),
    "notary fingerprint": (_fingerprint, lambda: NotaryBadInput, "text"),
    "notary form body": (_form, lambda: NotaryBadInput, "form"),
    "notary extended request": (_ext_request, lambda: NotaryBadInput, "json"),
    "notary legacy body": (_legacy_body, lambda: NotaryBadInput, "json"),
    "relay CONNECT head": (_relay_head, lambda: NotaryBadInput, "head"),
    "notary hosts file": (_hosts_file, lambda: NotaryBadInput, "text"),
    "notary --resolve": (_resolve_option, lambda: NotaryBadInput, "text"),
    "notary --listen": (_listen, lambda: NotaryBadInput, "text"),
    "notary config file (TOML)": (_config_file, lambda: NotaryBadInput, "toml"),
    "notary retired signing keys file": (_retired_keys_file, lambda: NotaryBadInput, "json"),
    "client bundle file": (_client_bundle, _client_errors, "json"),
    "client config (decoded)": (_client_config, _client_errors, "json"),
    "client config file": (_client_config_file, _client_errors, "json"),
    "client notary HTTP response": (_client_response, _client_errors, "http"),
    "client notary body": (_client_body, _client_errors, "json"),
    "client extended answer": (_client_answer, _client_errors, "json"),
    "client notary vote": (_client_outcome, _client_errors, "http"),
    "CA verifier (leaf extension bytes)": (_ca_verify, lambda: _NeverRaised, "der"),
    "replay flow CSV file": (_flow_csv, _replay_errors, "csv"),
    "replay flow fields": (_flow_fields, _replay_errors, "text"),
}


def _twin(data: bytes) -> object:
    if data.startswith(b"\x00") or len(data) > 3:
        raise KeyError("the must-fail twin crashes on purpose")
    return None


if os.environ.get("CONVERGE_FUZZ_TWIN") == "1":  # proves the harness reports crashes
    PARSERS["twin: crashes on purpose"] = (_twin, lambda: NotaryBadInput, "text")


# Crashes found in code the security suite does not own, reported to its owners. The
# hypothesis test records them as open bugs; the fuzzer tolerates exactly these so that it
# keeps looking for new ones in the same parsers.
# Empty now: the two client crashes found here (a RecursionError from a deeply nested
# converge.config, a ValueError from a Content-Length of non-ASCII digits) are fixed, and the
# tests that found them are strict again.
KNOWN_OPEN: dict[str, type[BaseException]] = {}


def run(name: str, data: bytes, *, tolerate_known: bool = False) -> None:
    """Call parser ``name`` on ``data``; its own error family is fine, anything else raises
    (``tolerate_known``: also the open bug recorded for it in :data:`KNOWN_OPEN`)."""
    parser, family, _ = PARSERS[name]
    allowed: tuple[type[BaseException], ...] = (family(),)
    if tolerate_known and name in KNOWN_OPEN:
        allowed += (KNOWN_OPEN[name],)
    with contextlib.suppress(*allowed):
        parser(data)
