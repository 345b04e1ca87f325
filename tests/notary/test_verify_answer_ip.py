"""``converge verify-answer --host --port`` refuses an answer about an address a client
named (the notary probed that address, not the host's own) unless ``--ip`` names it.

Uses the shared vectors: case 45 is a valid match about www.example.org probed at
93.184.216.34 because the client asked so. Without ``--ip`` it is wrong-target; the twin
with ``--ip 93.184.216.34`` verifies, and another ``--ip`` is wrong-target again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from converge.cli import main

VECTORS = Path(__file__).resolve().parents[2] / "client-libs" / "vectors"
DOC = json.loads((VECTORS / "extended-answers.json").read_text())


def _files(tmp_path: Path) -> tuple[list[str], str]:
    case = next(c for c in DOC["tests"] if c["type"] == "answer" and c["id"] == 45)
    answer = tmp_path / "a.answer"
    answer.write_text(case["answer"])
    bundles = json.loads((VECTORS / "bundles.json").read_text())
    bundle = json.loads(next(c["bundle"] for c in bundles["tests"] if c["result"] == "valid"
                             and '"version": 1' in c["bundle"]))
    bundle["protocols"] = ["convergence-v1", "converge-answer/1"]
    bundle["signing_keys"] = [DOC["signing_keys"][n] for n in ("current", "retired")]
    path = tmp_path / "b.notary"
    path.write_text(json.dumps(bundle))
    base = ["verify-answer", str(answer), "--bundle", str(path), "--json", "--host",
            "www.example.org", "--port", "443", "--now", str(case["expect"]["now"])]
    return base, str(case["expect"]["ip"])


def test_client_named_address_refused_without_ip(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, _ = _files(tmp_path)
    assert main(base) == 1
    assert json.loads(capsys.readouterr().out)["kind"] == "wrong-target"


def test_twin_with_the_same_ip_it_verifies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, ip = _files(tmp_path)
    assert main([*base, "--ip", ip]) == 0
    proven = json.loads(capsys.readouterr().out)
    assert proven["result"] == "valid" and "target and address" in proven["checked"]
    assert main([*base, "--ip", "192.0.2.1"]) == 1
    assert json.loads(capsys.readouterr().out)["kind"] == "wrong-target"


def test_ip_without_host_is_a_usage_error(tmp_path: Path) -> None:
    base, ip = _files(tmp_path)
    assert main([*base[:4], "--ip", ip]) == 2
