"""Table 4's compiled client: the Go conformance CLI's process start is measured (its
``info`` calls) to be subtracted from every ``check``; when the CLI is not built its rows are
skipped with a clear note in the report, not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.overhead import table4
from replay.overhead.report import _table4


def _t4(go: dict[str, object]) -> dict[str, object]:
    m = {"n": 1, "hit_ms": 100.0, "miss_ms": 200.0, "hit_plus_tcp_ms": 145.0,
         "miss_plus_tcp_ms": 290.0}
    return {"one notary": {"notary_rtts_ms": [45], "legacy": m, "extended": m, "go": go}}


def test_unbuilt_go_cli_is_skipped_with_a_note(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table4, "GO_CLI", table4.ROOT / "no-such-dir" / "converge-conformance")
    go = table4._GoCli(tmp_path)
    assert "Go conformance CLI is not built" in go.skipped
    assert "client-libs/go/test.sh" in go.skipped
    got = go.measure("one notary", [], 1, "00", 1, iter(()), 45)
    assert got == {"skipped": go.skipped}
    rows = [r.cells() for r in _table4(_t4(got)).rows]
    assert any(c[0] == "Go client (compiled)" and c[1] == "skipped" for c in rows), rows
    assert not any("Go client" in c[0] and "measured" in c[1] for c in rows)


@pytest.mark.skipif(not table4.GO_CLI.exists(), reason="client-libs/go/test.sh not run")
def test_built_go_cli_has_its_process_start_measured(tmp_path: Path) -> None:
    """The twin: the built CLI is not skipped; its start is a positive median of info calls,
    and the report's Go rows say it was subtracted."""
    go = table4._GoCli(tmp_path)
    assert go.skipped == ""
    assert 0 < go.start_ms < 5000
    m = {"n": 1, "hit_ms": 90.0, "miss_ms": 180.0, "hit_plus_tcp_ms": 135.0,
         "miss_plus_tcp_ms": 270.0}
    rows = [r.cells() for r in _table4(_t4({"process_start_ms": go.start_ms,
                                            "info_calls": table4.INFO_CALLS,
                                            "legacy": m, "extended": m})).rows]
    go_rows = [c for c in rows if c[0].endswith("Go client")]
    assert len(go_rows) == 4 and all("info calls (process start" in c[-1] for c in go_rows)
    assert not any(c[0] == "Go client (compiled)" for c in rows)
