"""The shared vectors, run through this implementation, and the generator's --verify mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from converge.vectors import SCHEMAS, compare, run_case

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
NOTARY_ONLY = {"canonical-json.json"}  # the signer's encoder: clients never re-serialise
FILES = sorted(f for f in VECTORS.glob("*.json") if f.name not in NOTARY_ONLY)


def _cases() -> list[tuple[str, int]]:
    out = []
    for f in FILES:
        doc = json.loads(f.read_text())
        out += [(f.name, c["id"]) for c in doc["tests"]]
    return out


_DOCS = {f.name: json.loads(f.read_text()) for f in FILES}


def test_every_schema_has_a_file() -> None:
    assert sorted(d["schema"] for d in _DOCS.values()) == sorted(SCHEMAS)


@pytest.mark.parametrize("name", sorted(_DOCS))
def test_vector_file_shape(name: str) -> None:
    doc = _DOCS[name]
    assert {"schema", "description", "notes", "tests"} <= set(doc)
    ids = [c["id"] for c in doc["tests"]]
    assert ids == list(range(1, len(ids) + 1))
    for c in doc["tests"]:
        assert c["comment"] and isinstance(c["flags"], list)
        assert set(c["flags"]) <= set(doc["notes"]), c
        if c["result"] == "invalid" and c.get("type") not in ("inclusion", "consistency"):
            assert c.get("error") or c.get("kind"), c  # extended-answers names it "kind"
        if c["result"] == "rejected":
            assert c["kind"], c


@pytest.mark.parametrize("name,case_id", _cases())
def test_vector_case(name: str, case_id: int) -> None:
    doc = _DOCS[name]
    case = doc["tests"][case_id - 1]
    assert compare(case, run_case(doc, case)) == []


def test_compare_reports_a_wrong_result() -> None:
    doc = _DOCS["fingerprints.json"]
    case = dict(doc["tests"][0])
    actual = run_case(doc, case)
    case["result"] = "invalid"
    assert compare(case, actual) == ["result: expected 'invalid', got 'valid'"]


def test_compare_reports_a_wrong_extended_verdict_and_kind() -> None:
    doc = _DOCS["extended-answers.json"]
    valid = next(c for c in doc["tests"] if c.get("verdict") == "match")
    assert compare({**valid, "verdict": "mismatch"}, run_case(doc, valid)) == [
        "verdict: expected 'mismatch', got 'match'"
    ]
    stale = next(c for c in doc["tests"] if c.get("kind") == "stale")
    assert compare({**stale, "kind": "bad-signature"}, run_case(doc, stale)) == [
        "kind: expected 'bad-signature', got 'stale'"
    ]


def test_extended_vectors_cover_every_failure_kind() -> None:
    from converge.extended import FAILURE_KINDS

    kinds = {c.get("kind") for c in _DOCS["extended-answers.json"]["tests"]}
    assert set(FAILURE_KINDS) <= kinds


def test_transparency_vectors_cover_every_log_kind() -> None:
    from converge.transparency import LOG_KINDS

    kinds = {c.get("kind") for c in _DOCS["transparency.json"]["tests"]}
    assert set(LOG_KINDS) <= kinds


def test_compare_reports_a_wrong_root_or_size() -> None:
    doc = _DOCS["transparency.json"]
    tree = next(c for c in doc["tests"] if c["type"] == "tree" and c["size"] == 7)
    other = next(c for c in doc["tests"] if c["type"] == "tree" and c["size"] == 8)
    assert compare({**tree, "root": other["root"]}, run_case(doc, tree)) == [
        f"root: expected {other['root']!r}, got {tree['root']!r}"
    ]
    ck = next(c for c in doc["tests"] if c["type"] == "checkpoint" and c["result"] == "valid")
    assert compare({**ck, "size": ck["size"] + 1}, run_case(doc, ck)) == [
        f"size: expected {ck['size'] + 1}, got {ck['size']}"
    ]
    # an inclusion case's root and size are inputs, never compared with the output
    inc = next(c for c in doc["tests"] if c["type"] == "inclusion")
    assert compare(inc, run_case(doc, inc)) == []


def test_generator_verify_passes() -> None:
    proc = subprocess.run(
        [sys.executable, str(VECTORS / "generate.py"), "--verify"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok    consensus.json" in proc.stdout


def test_generator_verify_catches_drift(tmp_path: Path) -> None:
    # Copy the vectors folder, corrupt one file, and run --verify on the copy.
    import shutil

    copy = tmp_path / "vectors"
    shutil.copytree(VECTORS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    f = copy / "cache.json"
    f.write_text(f.read_text().replace('"hit"', '"stale"', 1))
    proc = subprocess.run(
        [sys.executable, str(copy / "generate.py"), "--verify"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "STALE cache.json" in proc.stderr
