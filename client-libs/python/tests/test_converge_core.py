"""Unit tests of the pure rules and the small IO pieces (config files, the SQLite cache) that
the shared vectors do not cover."""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import pytest
from converge import ConfigError, Policy, decide, parse_fingerprint, settled
from converge.bundle import NotaryHost
from converge.cache import LocalCache
from converge.cachepolicy import cache_decision
from converge.config import (
    ENV_VAR,
    SYSTEM_DIR,
    add_notary,
    discover_config_dir,
    list_notaries,
    load_config,
    parse_config,
    remove_notary,
    set_enabled,
)
from converge.errors import BundleError, CacheIOError, NotaryUnreachable
from converge.legacy import parse_http_response, request_bytes
from converge.notary_io import connect_head, parse_connect_reply
from hypothesis import given
from hypothesis import strategies as st

VOTES = st.lists(st.sampled_from(["success", "failure", "unreachable"]), max_size=6)
POLICIES = st.sampled_from(list(Policy))
KEYS = Path(__file__).resolve().parents[2] / "vectors" / "keys"


# ------------------------------------------------------------------ policy


@given(POLICIES, VOTES, st.integers(0, 4), st.booleans())
def test_settled_agrees_with_every_completion(
    policy: Policy, votes: list[str], pending: int, stand_aside: bool
) -> None:
    v = settled(policy, votes, pending, stand_aside=stand_aside)  # type: ignore[arg-type]
    finals = {
        decide(policy, [*votes, *rest], stand_aside=stand_aside)  # type: ignore[list-item]
        for rest in itertools.product(["success", "failure", "unreachable"], repeat=pending)
    }
    assert (v is None) == (len(finals) > 1)
    if v is not None:
        assert finals == {v}


@given(VOTES, st.booleans())
def test_policies_are_ordered(votes: list[str], stand_aside: bool) -> None:
    # consensus => majority => minority
    c, m, n = (decide(p, votes, stand_aside=stand_aside) for p in Policy)  # type: ignore[arg-type]
    assert (not c or m) and (not m or n)


def test_policy_parse() -> None:
    assert Policy.parse(" Majority ") is Policy.MAJORITY
    with pytest.raises(ConfigError):
        Policy.parse("unanimous")
    with pytest.raises(ValueError):
        decide(Policy.MAJORITY, ["yes"], stand_aside=True)  # type: ignore[list-item]


@given(st.integers(0, 2**40), st.integers(0, 2**40), st.one_of(st.none(), st.integers(0, 10**9)))
def test_cache_decision_is_total(ts: int, now: int, lifetime: int | None) -> None:
    assert cache_decision(ts, now, lifetime) in ("hit", "stale")
    assert cache_decision(None, now, lifetime) == "miss"


# ------------------------------------------------------------------ fingerprints, requests


@given(st.binary(min_size=20, max_size=20), st.booleans(), st.booleans())
def test_fingerprint_round_trip(digest: bytes, colons: bool, lower: bool) -> None:
    text = (":" if colons else "").join(f"{b:02X}" for b in digest)
    fp = parse_fingerprint(text.lower() if lower else text)
    assert fp.digest == digest and fp.algorithm == "sha1"
    assert parse_fingerprint(fp.colon_hex()) == fp


def test_request_has_no_host_header_and_exact_length() -> None:
    fp = parse_fingerprint("00" * 20)
    raw = request_bytes("Example.COM", 443, fp)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /target/example.com+443 HTTP/1.0"
    assert b"host:" not in head.lower()
    assert f"Content-Length: {len(body)}".encode() in head


def test_http_response_limits() -> None:
    from converge import ResponseError

    ok = b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 100
    assert parse_http_response(ok, max_bytes=len(ok)).body == b"x" * 100
    with pytest.raises(ResponseError):
        parse_http_response(ok, max_bytes=len(ok) - 1)  # one past the limit
    with pytest.raises(ResponseError):
        parse_http_response(b"HTTP/1.0 200 OK\r\n" + b"X: y\r\n" * 5000 + b"\r\n")


# ------------------------------------------------------------------ configuration


def test_discovery_order(tmp_path: Path) -> None:
    explicit, envdir, home = tmp_path / "explicit", tmp_path / "env", tmp_path / "home"
    for d in (explicit, envdir, home / ".config" / "converge"):
        d.mkdir(parents=True)
    env = {ENV_VAR: str(envdir), "HOME": str(home)}
    assert discover_config_dir(explicit, env) == explicit
    assert discover_config_dir(None, env) == envdir
    assert discover_config_dir(None, {"HOME": str(home)}) == home / ".config" / "converge"
    xdg = tmp_path / "xdg"
    (xdg / "converge").mkdir(parents=True)
    assert discover_config_dir(None, {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}) == (
        xdg / "converge"
    )
    # twins: an explicit or environment directory that does not exist is an error
    with pytest.raises(ConfigError):
        discover_config_dir(tmp_path / "missing", env)
    with pytest.raises(ConfigError):
        discover_config_dir(None, {ENV_VAR: str(tmp_path / "missing"), "HOME": str(home)})
    if not SYSTEM_DIR.exists():
        with pytest.raises(ConfigError):
            discover_config_dir(None, {"HOME": str(tmp_path / "nobody")})


def test_config_keys(tmp_path: Path) -> None:
    cfg = parse_config(
        tmp_path,
        {
            "db": "/var/cache/converge.db",
            "userdb": "mine.db",
            "notaries-dir": "n",
            "notary-agreement": "consensus",
            "quorum": 5,
            "cache-lifetime": None,
            "stand-aside": False,
            "early-return": False,
            "notary-timeout": 1.5,
        },
    )
    assert cfg.db == Path("/var/cache/converge.db") and cfg.userdb == tmp_path / "mine.db"
    assert cfg.notaries_dir == tmp_path / "n" and cfg.agreement is Policy.CONSENSUS
    assert cfg.quorum == 5 and cfg.cache_lifetime is None and not cfg.stand_aside
    assert cfg.notary_timeout == 1.5
    defaults = parse_config(tmp_path, {})
    assert defaults.agreement is Policy.MAJORITY and defaults.stand_aside
    assert defaults.cache_lifetime == 604800 and defaults.db == tmp_path / "cache.sqlite3"


@pytest.mark.parametrize(
    "raw",
    [
        {"quorum": 0},
        {"quorum": 17},
        {"quorum": True},
        {"notary-agreement": "all"},
        {"stand-aside": "yes"},
        {"cache-lifetime": -1},
        {"notary-timeout": 0},
        {"notary-timeout": 601},
        {"bounce-port": 0},
        {"bounce": "yes"},
        {"colour": "blue"},
        {"db": ""},
        {"max-response-bytes": 10},
    ],
)
def test_config_rejects(tmp_path: Path, raw: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        parse_config(tmp_path, raw)


def test_load_config_file_errors(tmp_path: Path) -> None:
    (tmp_path / "converge.config").write_text("{not json")
    with pytest.raises(ConfigError):
        load_config(tmp_path)
    (tmp_path / "converge.config").write_text("[]")
    with pytest.raises(ConfigError):
        load_config(tmp_path)
    (tmp_path / "converge.config").write_text(json.dumps({"quorum": 2}))
    assert load_config(tmp_path).quorum == 2


def _bundle(name: str) -> bytes:
    cert = (KEYS / "test-notary-cert.pem").read_text()
    return json.dumps(
        {
            "version": 1,
            "name": name,
            "hosts": [
                {"host": "notary.test", "ssl_port": 443, "http_port": 80, "certificate": cert}
            ],
        }
    ).encode()


def test_notary_files(tmp_path: Path) -> None:
    _, p1 = add_notary(tmp_path, _bundle("Org One"))
    _, p2 = add_notary(tmp_path, _bundle("Org Two"), enable=False)
    assert [(b.name, en) for b, en, _ in list_notaries(tmp_path)] == [
        ("Org One", True),
        ("Org Two", False),
    ]
    # re-adding the same name replaces the file instead of duplicating it
    _, again = add_notary(tmp_path, _bundle("Org One"))
    assert again == p1 and len(list(tmp_path.glob("notaries-available/*.notary"))) == 2
    set_enabled(tmp_path, "Org Two", True)
    set_enabled(tmp_path, "Org One", False)
    assert [(b.name, en) for b, en, _ in list_notaries(tmp_path)] == [
        ("Org One", False),
        ("Org Two", True),
    ]
    cfg = parse_config(tmp_path, {})
    assert [b.name for b in cfg.notaries()] == ["Org Two"]
    remove_notary(tmp_path, "Org Two")
    assert not p2.exists() and cfg.notaries() == []
    # a dangling symlink is ignored; a broken bundle file is an error naming it
    (tmp_path / "notaries-enabled" / "gone.notary").symlink_to("../notaries-available/x.notary")
    assert [b.name for b, _, _ in list_notaries(tmp_path)] == ["Org One"]
    (tmp_path / "notaries-available" / "broken.notary").write_text("{}")
    with pytest.raises(BundleError, match="broken.notary"):
        list_notaries(tmp_path)


# ------------------------------------------------------------------ SQLite cache


def test_cache_reads_a_legacy_database(tmp_path: Path) -> None:
    """A cache written by the 2011 add-on's schema (milliseconds timestamps) still works."""
    db = tmp_path / "legacy.sqlite"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE fingerprints (id integer primary key, location TEXT, "
        "fingerprint TEXT, timestamp INTEGER)"
    )
    con.execute("CREATE UNIQUE INDEX location_fingerprint on fingerprints (location, fingerprint)")
    fp = parse_fingerprint("AB" * 20).colon_hex()
    con.execute(
        "INSERT INTO fingerprints (location, fingerprint, timestamp) VALUES (?,?,?)",
        ("www.example.com:443", fp, 1_700_000_000_000),
    )
    con.commit()
    con.close()
    cache = LocalCache(db)
    ts = cache.lookup("www.example.com:443", fp)
    assert ts == 1_700_000_000_000
    assert cache_decision(ts, 1_700_000_060, 3600) == "hit"
    assert cache.lookup("www.example.com:443", parse_fingerprint("CD" * 20).colon_hex()) is None
    cache.close()


def test_cache_shared_between_connections(tmp_path: Path) -> None:
    a, b = LocalCache(tmp_path / "c.sqlite3"), LocalCache(tmp_path / "c.sqlite3")
    a.store("h:1", "F", 10)
    assert b.lookup("h:1", "F") == 10
    b.store("h:1", "F", 20)  # upsert, no duplicate row
    assert a.lookup("h:1", "F") == 20 and len(a.entries()) == 1
    assert a._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    ro = LocalCache(tmp_path / "c.sqlite3", readonly=True)
    assert ro.lookup("h:1", "F") == 20
    with pytest.raises(CacheIOError):
        ro.store("h:1", "G", 1)
    for c in (a, b, ro):
        c.close()


def test_cache_open_failure_is_an_io_error(tmp_path: Path) -> None:
    (tmp_path / "dir.sqlite3").mkdir()
    with pytest.raises(CacheIOError):
        LocalCache(tmp_path / "dir.sqlite3")


# ------------------------------------------------------------------ bounce relay (pure parts)


def _hosts() -> list[NotaryHost]:
    from converge import parse_bundle

    cert = (KEYS / "test-notary-cert.pem").read_text()
    b = parse_bundle(
        {
            "version": 1,
            "name": "Org",
            "hosts": [
                {"host": h, "ssl_port": 443, "http_port": 80, "certificate": cert}
                for h in ("n1.example", "n2.example")
            ],
        }
    )
    return list(b.hosts)


def test_connect_head_names_every_host() -> None:
    head = connect_head(_hosts(), 4242)
    assert head == (
        b"CONNECT n1.example:4242 HTTP/1.1\r\nHost: n1.example\r\n"
        b"X-Convergence-Notary: n2.example+4242\r\n\r\n"
    )


def test_connect_reply() -> None:
    hosts = _hosts()
    ok = (
        b"HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\n"
        b"X-Convergence-Notary: n2.example\r\n\r\n"
    )
    assert parse_connect_reply(ok, hosts) is hosts[1]
    assert parse_connect_reply(ok.replace(b"n2.example", b"N2.example+4242"), hosts) is hosts[1]
    # twins: refusals and a destination that is not one of ours
    for bad in (
        b"HTTP/1.0 403 Access Denied\r\n\r\n",
        b"HTTP/1.0 404 Unable to connect\r\n\r\n",
        ok.replace(b"n2.example", b"evil.example"),
        b"garbage\r\n\r\n",
    ):
        with pytest.raises(NotaryUnreachable):
            parse_connect_reply(bad, hosts)
    # no header: only unambiguous with one destination
    bare = b"HTTP/1.0 200 Connection Established\r\n\r\n"
    assert parse_connect_reply(bare, hosts[:1]) is hosts[0]
    with pytest.raises(NotaryUnreachable):
        parse_connect_reply(bare, hosts)


# ------------------------------------------------------------------ robustness


@given(st.binary(max_size=2048))
def test_parsers_raise_only_bad_input(data: bytes) -> None:
    from converge import BadInput, parse_bundle
    from converge.legacy import parse_signed, split_body

    for parse in (parse_http_response, split_body, parse_signed, parse_bundle):
        try:
            out = parse(data)  # type: ignore[operator]
        except BadInput as e:  # anything else (KeyError, RecursionError, ...) fails the test
            assert e.kind in ("response", "signature", "bundle")
        else:
            assert out is not None


@given(st.text(max_size=300))
def test_fingerprint_parser_raises_only_bad_input(text: str) -> None:
    from converge import FingerprintError

    try:
        fp = parse_fingerprint(text)
    except FingerprintError as e:
        assert e.kind == "fingerprint"
    else:
        assert len(fp.digest) in (20, 32)


def test_cache_survives_concurrent_writers(tmp_path: Path) -> None:
    """Four processes writing the same file at once: no 'database is locked'."""
    import subprocess
    import sys

    db = tmp_path / "shared.sqlite3"
    LocalCache(db).close()
    code = (
        "import sys; from converge.cache import LocalCache\n"
        "c = LocalCache(sys.argv[1])\n"
        "for i in range(200): c.store(f'h{i}:443', sys.argv[2], i)\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), f"FP{n}"]) for n in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    c = LocalCache(db)
    assert len(c.entries()) == 800
    c.close()


def test_userdb_is_read_first_and_written(tmp_path: Path) -> None:
    from converge import Client, Config

    fp = parse_fingerprint("AB" * 20)
    shared = LocalCache(tmp_path / "shared.sqlite3")
    shared.store("shared.example:443", fp.colon_hex(), 1_700_000_000)
    shared.close()
    cfg = Config(
        directory=None, db=tmp_path / "shared.sqlite3", userdb=tmp_path / "mine.sqlite3", bundles=()
    )
    client = Client(cfg, clock=lambda: 1_700_000_100.0)
    assert client.check("shared.example", 443, fp).from_cache  # read from the shared db
    client._remember("mine.example:443", [fp], 1_700_000_100)
    mine = LocalCache(tmp_path / "mine.sqlite3")
    assert mine.lookup("mine.example:443", fp.colon_hex()) == 1_700_000_100
    mine.close()
    shared = LocalCache(tmp_path / "shared.sqlite3")
    assert shared.lookup("mine.example:443", fp.colon_hex()) is None  # never written there
    shared.close()
    client.close()


def test_forked_child_opens_its_own_cache_connection(tmp_path: Path) -> None:
    import multiprocessing

    from converge import Client, Config

    fp = parse_fingerprint("AB" * 20)
    cfg = Config(directory=None, db=tmp_path / "c.sqlite3", bundles=())
    client = Client(cfg, clock=lambda: 1_700_000_000.0)
    client._remember("h.example:443", [fp], 1_700_000_000)
    parent_conn = client._open_caches()[0]
    assert client.check("h.example", 443, fp).from_cache

    def child(q: multiprocessing.Queue[object]) -> None:
        fresh = client._open_caches()[0] is not parent_conn
        q.put((fresh, client.check("h.example", 443, fp).from_cache))

    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[object] = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    assert q.get(timeout=30) == (True, True)
    p.join(timeout=30)
    assert p.exitcode == 0
    assert client._open_caches()[0] is parent_conn  # the parent keeps its connection
    client.close()


@pytest.mark.parametrize("entries,ok", [(1000, True), (1001, False)])
def test_history_length_bound(entries: int, ok: bool) -> None:
    """MAX_HISTORY_ENTRIES: at the limit the body verifies; one past it is refused."""
    import base64

    from converge import ResponseError
    from converge.legacy import MAX_HISTORY_ENTRIES, verify_body
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    assert entries - MAX_HISTORY_ENTRIES in (0, 1)
    key = serialization.load_pem_private_key((KEYS / "test-notary-key.pem").read_bytes(), None)
    cert = x509.load_pem_x509_certificate((KEYS / "test-notary-cert.pem").read_bytes())
    item = '{"timestamp": {"start": "1", "finish": "2"}, "fingerprint": "' + "AB:" * 19 + 'AB"}'
    payload = ('{"fingerprintList": [' + ", ".join([item] * entries) + "]}").encode()
    sig = key.sign(payload, padding.PKCS1v15(), hashes.SHA1())  # type: ignore[union-attr,call-arg]
    body = payload[:-1] + b', "signature": "' + base64.b64encode(sig) + b'"}'
    if ok:
        assert len(verify_body(body, cert.public_key()).entries) == entries
    else:
        with pytest.raises(ResponseError):
            verify_body(body, cert.public_key())


# ------------------------------------------------------------------ the bounds scan

_bounded_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**15) + 1, 10**15 - 1)
    | st.text(alphabet=st.sampled_from('ab"\\[]{}é\n'), max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet=st.sampled_from('k"\\[{'), max_size=3), inner,
                      max_size=3),
    max_leaves=10,
)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@given(_bounded_json, st.sampled_from([(", ", ": "), (",", ":")]), st.booleans())
def test_strict_parse_round_trips_what_the_bounds_allow(
    value: object, separators: tuple[str, str], ascii_only: bool
) -> None:
    """Strings full of brackets and quotes do not count; every integer of at most 15 digits
    and every depth up to 32 passes (the generated values stay far below it)."""
    from converge.signedjson import loads_verified

    text = json.dumps(value, separators=separators, ensure_ascii=ascii_only)
    assert _depth(value) <= 32
    assert loads_verified(text.encode("utf-8")) == value


@pytest.mark.parametrize(
    "ok,bad",
    [
        ("[" * 32 + "]" * 32, "[" * 33 + "]" * 33),
        ('{"a": ' * 31 + "[]" + "}" * 31, '{"a": ' * 32 + "[]" + "}" * 32),
        ("[999999999999999]", "[9999999999999999]"),
        ("[-999999999999999]", "[-9999999999999999]"),
        ("[0]", "[00]"),
        ("[1]", "[1.0]"),
        ("[1]", "[1e0]"),
        ("[null]", "[NaN]"),
        ("[null]", "[-Infinity]"),
        ('{"1": 2}', "{1: 2}"),
        ('["\\u00e9"]', b'["\xff"]'),
    ],
)
def test_bounds_and_strictness_at_the_limit_and_one_past(ok: str, bad: str | bytes) -> None:
    from converge.signedjson import loads_verified

    loads_verified(ok.encode())
    with pytest.raises(ValueError):
        loads_verified(bad if isinstance(bad, bytes) else bad.encode())


def _reference_bounds_scan(data: bytes) -> None:
    """The bounds scan as the rules state it, one token at a time (the reference the module's
    faster form must agree with)."""
    import re

    token_re = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[\[\]{}]|[-0-9][-+.0-9eE]*',
                          re.DOTALL)
    depth = 0
    for m in token_re.finditer(data):
        token = m.group()
        if token[:1] == b'"':
            continue
        if token[:1] in (b"[", b"{"):
            depth += 1
            if depth > 32:
                raise ValueError("deep")
        elif token[:1] in (b"]", b"}"):
            depth -= 1
        elif not re.fullmatch(rb"-?(?:0|[1-9][0-9]{0,14})", token):
            raise ValueError("number")


@given(st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"0", b"1", b"-", b".",
                                 b"e", b"9" * 15, b"9" * 16, b" ", b",", b":", b"x", b"[" * 33,
                                 b'"\\"', b"1.5", b"-0", b"01"]), max_size=60))
def test_bounds_scan_agrees_with_the_token_by_token_reference(parts: list[bytes]) -> None:
    from converge.signedjson import bounds_scan

    data = b"".join(parts)
    try:
        _reference_bounds_scan(data)
        expected = True
    except ValueError:
        expected = False
    try:
        bounds_scan(data)
        got = True
    except ValueError:
        got = False
    assert got == expected, data


def _scan_then_parse(data: bytes) -> object:
    """What the rules accept: the token-by-token bounds scan, then the strict stock parse."""
    _reference_bounds_scan(data)

    def refuse(name: str) -> object:
        raise ValueError(name)

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


_JSONISH = st.lists(st.sampled_from([
    b"[", b"]", b"{", b"}", b'"', b'"a"', b'"[{"', b"\\", b":", b",", b" ", b"0", b"1", b"-",
    b".", b"e", b"E", b"+", b"9" * 15, b"9" * 16, b"-0", b"01", b"1.5", b"1e5", b"null",
    b"true", b"NaN", b"Infinity", b"[" * 33, b"]" * 33, b"[" * 16, b"]" * 16, b'{"k":',
    b"\xff", b"\xc3\xa9"]), max_size=40)


@given(_JSONISH)
def test_loads_verified_accepts_exactly_what_the_scan_then_the_parse_accept(
        parts: list[bytes]) -> None:
    """The module's parse (depth scan only past 32 brackets, numbers checked by the parser's
    hooks) against the rules done in order; a twin of each outcome is in the set below."""
    from converge.signedjson import loads_verified

    data = b"".join(parts)
    try:
        expected: object = ("ok", _scan_then_parse(data))
    except (ValueError, RecursionError):
        expected = "refused"
    try:
        got: object = ("ok", loads_verified(data))
    except (ValueError, RecursionError):
        got = "refused"
    assert got == expected, data


@pytest.mark.parametrize("data,accepted", [
    (b'{"a": [1, -0, 999999999999999]}', True),
    (b'{"a": [1, -0, 9999999999999999]}', False),
    (b'{"a": "' + b"[" * 40 + b'", "b": 2}', True),  # brackets in a string: many, not deep
    (b'{"a": "' + b"[" * 40 + b'", "b": 2.5}', False),
    (b"[" * 32 + b"1" + b"]" * 32, True),
    (b"[" * 33 + b"1" + b"]" * 33, False),
    (b'["1.5", "1e5"]', True),  # numbers' look-alikes in strings are strings
    (b'["1.5", 1e5]', False),
])
def test_loads_verified_fast_paths_at_their_edges(data: bytes, accepted: bool) -> None:
    from converge.signedjson import loads_verified

    if accepted:
        assert loads_verified(data) == json.loads(data)
    else:
        with pytest.raises(ValueError):
            loads_verified(data)
