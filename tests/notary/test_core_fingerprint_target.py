"""Pure core: fingerprints, the /target path, and the request body."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from notary.core.fingerprint import MAX_INPUT, CertDigests, colon_hex, parse_fingerprint
from notary.core.request import MAX_FIELDS, parse_form_fingerprint
from notary.core.target import (
    MAX_NAME,
    MAX_PATH,
    Target,
    normalise_host,
    parse_ip,
    parse_port,
    parse_target_path,
)
from notary.errors import BadFingerprint, BadInput, BadTarget, MissingFingerprint

digests = st.one_of(st.binary(min_size=20, max_size=20), st.binary(min_size=32, max_size=32))

# -- fingerprints -------------------------------------------------------------------------


@given(digests)
def test_canonical_form_round_trips(digest: bytes) -> None:
    fp = parse_fingerprint(colon_hex(digest))
    assert fp.digest == digest
    assert fp.algorithm == ("sha1" if len(digest) == 20 else "sha256")
    assert fp.canonical == colon_hex(digest)
    assert parse_fingerprint(fp.canonical) == fp


@given(digests, st.sampled_from(["", ":"]), st.booleans(), st.sampled_from(["", " \t\r\n"]))
def test_any_case_and_separator_parse_the_same(
    digest: bytes, sep: str, upper: bool, pad: str
) -> None:
    text = digest.hex(sep) if sep else digest.hex()
    text = text.upper() if upper else text.lower()
    assert parse_fingerprint(pad + text + pad).digest == digest


@given(digests, st.sampled_from(["-", " ", "."]), st.sampled_from(["\v", "\f", "\xa0"]))
def test_other_separators_and_non_ascii_padding_are_refused(
    digest: bytes, sep: str, pad: str
) -> None:
    """One rule with the clients (client-libs/vectors/fingerprints.json): a colon between every
    pair or none; only ASCII space, tab, CR and LF around it."""
    with pytest.raises(BadFingerprint):
        parse_fingerprint(digest.hex(sep))
    with pytest.raises(BadFingerprint):
        parse_fingerprint(pad + digest.hex(":") + pad)


def test_canonical_is_upper_colon_hex_59_chars_for_sha1() -> None:
    fp = parse_fingerprint("8fc079e814777f688ba4c807d9bd67d62af71aeb")
    assert fp.canonical == "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
    assert len(fp.canonical) == 59


def test_matches_compares_the_right_digest() -> None:
    d = CertDigests.of(b"a certificate")
    other = CertDigests.of(b"another certificate")
    assert parse_fingerprint(d.sha1.hex()).matches(d.sha1, d.sha256)
    assert parse_fingerprint(d.sha256.hex()).matches(d.sha1, d.sha256)
    assert not parse_fingerprint(other.sha1.hex()).matches(d.sha1, d.sha256)
    assert not parse_fingerprint(other.sha256.hex()).matches(d.sha1, d.sha256)
    # a SHA-1 value is never compared against the SHA-256 digest
    assert not parse_fingerprint(d.sha256[:20].hex()).matches(d.sha1, d.sha256)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "zz" * 20,
        "0" * 39,  # odd
        "00" * 19,  # 19 bytes
        "00" * 21,  # 21 bytes
        "00" * 33,
        "00" * 64,  # SHA-512 length
        "0:00" + ":00" * 18,  # a single-digit group
        "000:00" + ":00" * 18,
        "00:" * 20,  # trailing separator
        ":" + "00:" * 19 + "00",
        "00:00-00" + ":00" * 17,  # mixed separators
        "0x" + "00" * 20,
        "00" * 19 + "0g",
        "\u0661\u0662" * 20,  # Arabic-Indic digits
        "ＡＢ" * 20,  # full-width letters
        "00\x00" * 20,
        "0" * (MAX_INPUT + 1),
    ],
)
def test_bad_fingerprints_are_rejected(text: str) -> None:
    with pytest.raises(BadFingerprint) as info:
        parse_fingerprint(text)
    assert info.value.status == 400
    assert info.value.message


@given(st.text(max_size=300))
def test_fingerprint_parser_never_fails_otherwise(text: str) -> None:
    try:
        fp = parse_fingerprint(text)
    except BadFingerprint:
        return
    assert len(fp.digest) in (20, 32)


# -- target paths -------------------------------------------------------------------------


names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9](\.[a-z][a-z0-9]{0,10}){0,3}", fullmatch=True)


@given(names, st.integers(1, 65535))
def test_name_and_port_round_trip(name: str, port: int) -> None:
    t = parse_target_path(f"{name}+{port}")
    assert t == Target(name, port)
    assert t.location == f"{name}:{port}"
    assert parse_target_path(f"{name.upper()}.+{port}") == t  # case and trailing dot folded


@given(st.ip_addresses(), st.integers(1, 65535))
def test_ip_literal_round_trip(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
) -> None:
    text = f"[{ip}]" if ip.version == 6 else str(ip)
    t = parse_target_path(f"{text}+{port}")
    assert t.host == ip.compressed and t.port == port and t.host_is_ip
    assert parse_ip(t.host) == ip


def test_optional_ip_segment() -> None:
    t = parse_target_path("Site.Test+443/127.0.0.1")
    assert t == Target("site.test", 443, ipaddress.ip_address("127.0.0.1"))
    assert t.location == "site.test:443"
    t6 = parse_target_path("site.test+443/[::1]")
    assert t6.ip == ipaddress.ip_address("::1")
    assert parse_target_path("site.test+443/%3A%3A1").ip == ipaddress.ip_address("::1")


def test_percent_encoded_plus_is_accepted() -> None:
    assert parse_target_path("site.test%2B443") == Target("site.test", 443)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "You must specify a target."),
        ("site.test", "You must specify a destination port."),
        ("site.test443", "You must specify a destination port."),
        ("+443", "You must specify a target."),
        ("site.test+", "You must specify a destination port."),
        ("a+b+443", "more than one '+'"),
        ("site.test++443", "more than one '+'"),
        ("site.test+0", "1 to 65535"),
        ("site.test+65536", "1 to 65535"),
        ("site.test+99999", "1 to 65535"),
        ("site.test+443443", "1 to 65535"),
        ("site.test+abc", "1 to 65535"),
        ("site.test++443", "more than one '+'"),
        ("site.test+ 443", "1 to 65535"),
        ("site.test+%20443", "1 to 65535"),
        ("site.test+443 ", "1 to 65535"),
        ("site.test+-1", "1 to 65535"),
        ("site.test+4e2", "1 to 65535"),
        ("site.test+0x1bb", "1 to 65535"),
        ("site.test+\u0664\u0664\u0663", "1 to 65535"),  # Arabic-Indic digits
        ("site.test+443/", "empty IP segment"),
        ("site.test+443/not-an-ip", "must be an IP address"),
        ("site.test+443/127.0.0.1/x", "too many segments"),
        ("site.test+443/fe80::1%25eth0", "must be an IP address"),
        ("../../etc/passwd+443", "too many segments"),
        ("..%2F..%2Fetc+443", "too many segments"),
        ("..+443", "label"),
        (".+443", "empty"),
        ("a..b+443", "label"),
        ("-a.test+443", "'-'"),
        ("a-.test+443", "'-'"),
        ("a" * 64 + ".test+443", "label"),
        (("a" * 60 + ".") * 5 + "test+443", "253"),
        ("ex ample.test+443", "characters"),
        ("ex%00ample.test+443", "characters"),
        ("ex\x00ample.test+443", "characters"),
        ("bücher.test+443", "characters"),
        ("b%C3%BCcher.test+443", "characters"),
        ("%FF.test+443", "characters"),
        ("site.test:443+443", "characters"),
        ("user@site.test+443", "characters"),
        ("[::1+443", "characters"),
        ("::1]+443", "characters"),
        ("[1.2.3.4]+443", "characters"),
        ("fe80::1%eth0+443", "characters"),
        ("1.2.3.256+443", "numeric"),
        ("127.1+443", "numeric"),
        ("2130706433+443", "numeric"),
        ("x" * (MAX_PATH + 1), "too long"),
    ],
)
def test_bad_target_paths(spec: str, message: str) -> None:
    with pytest.raises(BadTarget) as info:
        parse_target_path(spec)
    assert message in info.value.message
    assert info.value.status == 400


def test_longest_legal_name_is_accepted_and_one_more_is_not() -> None:
    label = "a" * 63
    name = ".".join([label, label, label, "a" * 61])  # 253 characters
    assert len(name) == MAX_NAME
    assert normalise_host(name) == name
    assert normalise_host(name + ".") == name
    with pytest.raises(BadTarget):
        normalise_host(name + "a")


def test_port_limits() -> None:
    assert parse_port("1") == 1
    assert parse_port("65535") == 65535
    for bad in ("0", "65536", "", "00000", "+443", "443.0"):
        with pytest.raises(BadTarget):
            parse_port(bad)


@given(st.text(max_size=700))
def test_target_parser_raises_only_bad_target(spec: str) -> None:
    try:
        t = parse_target_path(spec)
    except BadTarget:
        return
    assert 1 <= t.port <= 65535
    assert t.host == t.host.lower() or t.host_is_ip
    # whatever parsed is stable under re-parsing its own location form
    reparsed = parse_target_path(
        f"{'[' + t.host + ']' if ':' in t.host else t.host}+{t.port}"
        + (f"/{t.ip.compressed}" if t.ip is not None else "")
    )
    assert reparsed == t


# -- the form body ------------------------------------------------------------------------

SHA1 = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"


@pytest.mark.parametrize(
    "body",
    [
        f"fingerprint={SHA1}".encode(),
        f"fingerprint={SHA1.replace(':', '%3A')}".encode(),
        f"fingerprint={SHA1.lower()}".encode(),
        f"other=1&fingerprint={SHA1}".encode(),
        f"fingerprint={SHA1.replace(':', '')}&x=y".encode(),
    ],
)
def test_form_fingerprint_parses(body: bytes) -> None:
    assert parse_form_fingerprint(body).canonical == SHA1


@pytest.mark.parametrize("body", [b"", b"fingerprint=", b"fingerprint=%20", b"other=1", b"&&"])
def test_missing_fingerprint_has_the_legacy_message(body: bytes) -> None:
    with pytest.raises(MissingFingerprint) as info:
        parse_form_fingerprint(body)
    assert info.value.message == "You must specify a fingerprint."


@pytest.mark.parametrize(
    "body",
    [
        f"fingerprint={SHA1}&fingerprint={SHA1}".encode(),
        b"fingerprint=" + "é".encode(),
        b"fingerprint=zz",
        b"&".join([b"a=1"] * (MAX_FIELDS + 1)) + f"&fingerprint={SHA1}".encode(),
    ],
)
def test_bad_form_bodies(body: bytes) -> None:
    with pytest.raises(BadInput):
        parse_form_fingerprint(body)


@given(st.binary(max_size=300))
def test_form_parser_raises_only_bad_input(body: bytes) -> None:
    try:
        fp = parse_form_fingerprint(body)
    except BadInput:
        return
    assert len(fp.digest) in (20, 32)
