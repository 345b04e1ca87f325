"""Vector cases for parsing: fingerprints, request bytes, bundles."""

from __future__ import annotations

import hashlib as _h
import json
from typing import Any

from _common import CERTS, FP_A, FP_A256, LEGACY, TC_BUNDLE, Case, numbered
from cryptography import x509
from cryptography.hazmat.primitives import serialization

# ----------------------------------------------------------------------------- fingerprints


def fingerprints() -> dict[str, Any]:
    sha1 = "8F:C0:79:E8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2A:F7:1A:EB"
    sha256 = FP_A256
    ok = "valid"
    cases: list[Case] = [
        {"comment": "canonical SHA-1", "input": sha1, "result": ok},
        {
            "comment": "lower case with colons",
            "input": sha1.lower(),
            "result": ok,
            "flags": ["case"],
        },
        {"comment": "no separators, upper", "input": sha1.replace(":", ""), "result": ok},
        {
            "comment": "no separators, lower",
            "input": sha1.replace(":", "").lower(),
            "result": ok,
            "flags": ["case"],
        },
        {
            "comment": "mixed case",
            "input": "8f:C0:79:e8:14:77:7F:68:8B:A4:C8:07:D9:BD:67:D6:2a:F7:1A:EB",
            "result": ok,
            "flags": ["case"],
        },
        {
            "comment": "surrounding whitespace is ignored",
            "input": f" {sha1}\n",
            "result": ok,
            "flags": ["whitespace"],
        },
        {"comment": "canonical SHA-256", "input": sha256, "result": ok, "flags": ["sha256"]},
        {
            "comment": "SHA-256 lower, no separators",
            "input": sha256.replace(":", "").lower(),
            "result": ok,
            "flags": ["sha256", "case"],
        },
        {"comment": "empty", "input": "", "result": "invalid", "error": "fingerprint"},
        {"comment": "only whitespace", "input": "  ", "result": "invalid", "error": "fingerprint"},
        {
            "comment": "19 bytes",
            "input": sha1[:-3],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "21 bytes",
            "input": sha1 + ":00",
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "MD5-sized (16 bytes)",
            "input": "00" * 16,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "SHA-512-sized (64 bytes)",
            "input": "00" * 64,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "odd number of hex digits",
            "input": sha1.replace(":", "")[:-1],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["length"],
        },
        {
            "comment": "non-hex character",
            "input": "G" + sha1[1:],
            "result": "invalid",
            "error": "fingerprint",
        },
        {
            "comment": "separators only between some pairs",
            "input": sha1.replace(":", "", 3),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "dash separators",
            "input": sha1.replace(":", "-"),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "space separators",
            "input": sha1.replace(":", " "),
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "single-digit groups",
            "input": "8:C0" + sha1[4:],
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "trailing colon",
            "input": sha1 + ":",
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["separators"],
        },
        {
            "comment": "algorithm prefix is not accepted",
            "input": "sha1:" + sha1,
            "result": "invalid",
            "error": "fingerprint",
        },
        {
            "comment": "exactly 200 characters with padding (the input bound)",
            "input": " " * (200 - len(sha1)) + sha1,
            "result": "valid",
            "flags": ["limit", "whitespace"],
        },
        {
            "comment": "201 characters: one past the input bound",
            "input": " " * (201 - len(sha1)) + sha1,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["limit"],
        },
        {
            "comment": "well over the 200-character input bound",
            "input": " " * 150 + sha1,
            "result": "invalid",
            "error": "fingerprint",
            "flags": ["limit"],
        },
        {
            "comment": "non-ASCII digit",
            "input": "\u0660" * 40,
            "result": "invalid",
            "error": "fingerprint",
        },
    ]
    for c in cases:
        if c["result"] == "valid":
            hexd = c["input"].strip().replace(":", "").upper()
            c["algorithm"] = "sha1" if len(hexd) == 40 else "sha256"
            c["canonical"] = ":".join(hexd[i : i + 2] for i in range(0, len(hexd), 2))
    return {
        "schema": "converge-vectors/fingerprints/1",
        "description": "Parsing certificate fingerprints given by users and notaries. Output "
        "for valid input: the algorithm and the canonical form (upper-case, colon-separated).",
        "notes": {
            "case": "hex digits in any case are accepted",
            "whitespace": "surrounding ASCII whitespace is stripped",
            "sha256": "SHA-256 fingerprints (32 bytes) are accepted besides SHA-1",
            "length": "only 20 and 32 byte digests are fingerprints",
            "separators": "a colon between every pair of digits, or no separator at all",
            "limit": "inputs over 200 characters are refused before parsing",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- requests


def requests_() -> dict[str, Any]:
    def req(host: str, port: int, fpr: str) -> str:
        body = f"fingerprint={fpr}"
        return (
            f"POST /target/{host}+{port} HTTP/1.0\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        )

    cases: list[Case] = [
        {
            "comment": "the add-on's request",
            "host": "www.example.com",
            "port": 443,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("www.example.com", 443, FP_A),
        },
        {
            "comment": "fingerprint normalised to canonical form",
            "host": "example.org",
            "port": 8443,
            "fingerprint": FP_A.replace(":", "").lower(),
            "result": "valid",
            "request": req("example.org", 8443, FP_A),
            "flags": ["normalise"],
        },
        {
            "comment": "host name lower-cased",
            "host": "WWW.Example.COM",
            "port": 443,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("www.example.com", 443, FP_A),
            "flags": ["normalise"],
        },
        {
            "comment": "SHA-256 sent as is (canonical)",
            "host": "127.0.0.1",
            "port": 4433,
            "fingerprint": FP_A256,
            "result": "valid",
            "request": req("127.0.0.1", 4433, FP_A256),
            "flags": ["sha256"],
        },
        {
            "comment": "slash in host",
            "host": "a/b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "space in host",
            "host": "a b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "plus in host",
            "host": "a+b",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "empty host",
            "host": "",
            "port": 443,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
        },
        {
            "comment": "port 0",
            "host": "example.com",
            "port": 0,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
            "flags": ["limit"],
        },
        {
            "comment": "port 65536",
            "host": "example.com",
            "port": 65536,
            "fingerprint": FP_A,
            "result": "invalid",
            "error": "target",
            "flags": ["limit"],
        },
        {
            "comment": "port 65535",
            "host": "example.com",
            "port": 65535,
            "fingerprint": FP_A,
            "result": "valid",
            "request": req("example.com", 65535, FP_A),
            "flags": ["limit"],
        },
    ]
    return {
        "schema": "converge-vectors/requests/1",
        "description": "The exact bytes of a legacy notary request (HTTP/1.0, no Host header, "
        "Connection: close, form body with the canonical fingerprint, colons unescaped).",
        "notes": {
            "normalise": "host names are lower-cased, fingerprints made canonical",
            "sha256": "SHA-256 fingerprints are sent in their canonical form",
            "limit": "ports must be 1..65535",
        },
        "tests": numbered(cases),
    }


# ----------------------------------------------------------------------------- bundles


def bundles() -> dict[str, Any]:
    tc = (LEGACY / "thoughtcrime.notary").read_text().rstrip("\n")
    cert = CERTS["test-notary"]
    host = {"host": "notary-a.test", "ssl_port": 443, "http_port": 80, "certificate": cert}
    v1 = {
        "version": 1,
        "name": "Test Org",
        "bundle_location": "https://notary-a.test/a.notary",
        "hosts": [host],
    }

    def with_(obj: dict[str, Any], **kw: Any) -> str:
        o = dict(obj)
        for k, v in kw.items():
            if v is ...:
                o.pop(k, None)
            else:
                o[k] = v
        return json.dumps(o)

    def hosts_out(*names: tuple[str, int, int, str]) -> list[dict[str, Any]]:
        return [{"host": h, "ssl_port": s, "http_port": p, "pin": pin} for h, s, p, pin in names]

    def pin(pem: str) -> str:
        der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
        return ":".join(f"{b:02X}" for b in _h.sha1(der).digest())

    a = ("notary-a.test", 443, 80, pin(cert))
    bad = {"result": "invalid", "error": "bundle"}
    cases: list[Case] = [
        {
            "comment": "the real 2011 thoughtcrime bundle (v1, two hosts)",
            "bundle": tc,
            "result": "valid",
            "name": "Thoughtcrime Labs",
            "version": 1,
            "hosts": hosts_out(
                *[
                    (h["host"], h["ssl_port"], h["http_port"], pin(h["certificate"]))
                    for h in TC_BUNDLE["hosts"]
                ]
            ),
            "flags": ["real-2011"],
        },
        {
            "comment": "v1, one host",
            "bundle": json.dumps(v1),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v1 with a region",
            "bundle": with_(v1, region="de"),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v1 without bundle_location",
            "bundle": with_(v1, bundle_location=...),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(a),
        },
        {
            "comment": "v0: a single host, named after it",
            "bundle": json.dumps(host),
            "result": "valid",
            "name": "notary-a.test",
            "version": 0,
            "hosts": hosts_out(a),
            "flags": ["v0"],
        },
        {
            "comment": "v0 with explicit version 0",
            "bundle": json.dumps({"version": 0, **host}),
            "result": "valid",
            "name": "notary-a.test",
            "version": 0,
            "hosts": hosts_out(a),
            "flags": ["v0"],
        },
        {"comment": "version 2", "bundle": with_(v1, version=2), **bad, "flags": ["version"]},
        {
            "comment": "version as a string",
            "bundle": with_(v1, version="1"),
            **bad,
            "flags": ["version"],
        },
        {"comment": "version true", "bundle": with_(v1, version=True), **bad, "flags": ["version"]},
        {"comment": "no name", "bundle": with_(v1, name=...), **bad},
        {"comment": "empty name", "bundle": with_(v1, name=" "), **bad},
        {"comment": "no hosts", "bundle": with_(v1, hosts=[]), **bad},
        {"comment": "17 hosts", "bundle": with_(v1, hosts=[host] * 17), **bad, "flags": ["limit"]},
        {
            "comment": "16 hosts",
            "bundle": with_(v1, hosts=[host] * 16),
            "result": "valid",
            "name": "Test Org",
            "version": 1,
            "hosts": hosts_out(*[a] * 16),
            "flags": ["limit"],
        },
        {
            "comment": "host without certificate",
            "bundle": with_(v1, hosts=[{k: v for k, v in host.items() if k != "certificate"}]),
            **bad,
        },
        {
            "comment": "certificate is not PEM",
            "bundle": with_(v1, hosts=[{**host, "certificate": "hello"}]),
            **bad,
        },
        {
            "comment": "certificate PEM with a broken body",
            "bundle": with_(v1, hosts=[{**host, "certificate": cert.replace("M", "A", 40)}]),
            **bad,
        },
        {
            "comment": "two certificates in one PEM",
            "bundle": with_(v1, hosts=[{**host, "certificate": cert + cert}]),
            **bad,
        },
        {
            "comment": "ssl_port 0",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": 0}]),
            **bad,
            "flags": ["limit"],
        },
        {
            "comment": "ssl_port 65536",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": 65536}]),
            **bad,
            "flags": ["limit"],
        },
        {
            "comment": "ssl_port as a string",
            "bundle": with_(v1, hosts=[{**host, "ssl_port": "443"}]),
            **bad,
        },
        {
            "comment": "http_port missing",
            "bundle": with_(v1, hosts=[{k: v for k, v in host.items() if k != "http_port"}]),
            **bad,
        },
        {
            "comment": "host name with a slash",
            "bundle": with_(v1, hosts=[{**host, "host": "a/b"}]),
            **bad,
        },
        {
            "comment": "bundle_location over http",
            "bundle": with_(v1, bundle_location="http://notary-a.test/a.notary"),
            **bad,
        },
        {
            "comment": "bundle_location not ending in .notary",
            "bundle": with_(v1, bundle_location="https://notary-a.test/a.json"),
            **bad,
        },
        {"comment": "region of three letters", "bundle": with_(v1, region="DEU"), **bad},
        {"comment": "not JSON", "bundle": "{version: 1}", **bad},
        {"comment": "a JSON array", "bundle": "[]", **bad},
        {
            "comment": "larger than 64 KiB",
            "bundle": with_(v1, padding="x" * 65536),
            **bad,
            "flags": ["limit"],
        },
    ]
    return {
        "schema": "converge-vectors/bundles/1",
        "description": "Parsing .notary bundles (v1 and the v0 single-host form). Output for "
        "valid bundles: name, version and each host with its pin (SHA-1 of the DER "
        "certificate, canonical form).",
        "notes": {
            "real-2011": "the bundle published by Thoughtcrime Labs in 2011",
            "v0": "the version-less single-host form",
            "version": "only versions 0 and 1 (integers) are accepted",
            "limit": "bounds: 16 hosts, ports 1..65535, 64 KiB per bundle",
        },
        "tests": numbered(cases),
    }
