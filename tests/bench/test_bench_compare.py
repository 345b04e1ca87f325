"""bench.compare: this machine's runs records against the recorded ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import compare

ROOT = Path(__file__).resolve().parents[2]


def _replay(rate: float, p99: float, boot: str) -> dict[str, Any]:
    def s(x: float) -> dict[str, float]:
        return {"median": x, "min": x * 0.9, "max": x * 1.1}

    return {"commit": "c" * 40, "started_at": "2026-11-28T12:00:00+00:00",
            "machine": {"cpu": "AMD EPYC", "kernel": "6.18", "boot_id": boot},
            "goal": {"rate": 20_000.0, "p99_ms": 10.0},
            "conditions": {"busy": {"sustained_rate": s(rate), "p99_ms_at_goal": s(p99),
                                    "sender_cpu_us_at_goal": s(25.0)}}}


def _write(d: Path, name: str, doc: dict[str, Any]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.json").write_text(json.dumps(doc))


def test_a_figure_within_the_tolerance_and_one_beyond_it() -> None:
    """+10% is within 15%, -40% is not (the twin); the goal is judged on this machine's
    median: 24,000/s holds >= 20,000/s, a p99 of 12 ms does not hold < 10 ms."""
    rec = compare.figures("replay-runs", _replay(20_000, 8.0, "a"))
    here = compare.figures("replay-runs", _replay(12_000, 8.8, "b"))
    rows = {r.figure: r for r in compare.compare(rec, here, "replay-runs")}
    rate = rows["replay, busy: highest rate, every rate up to it under the limit (/s)"]
    p99 = rows["replay, busy: send lateness p99 at 20,000/s (ms)"]
    assert (round(rate.change, 2), rate.within, rate.here.met) == (-0.4, False, False)
    assert (round(p99.change, 2), p99.within, p99.here.met) == (0.1, True, True)
    assert rows["replay, busy: sender CPU per request at 20,000/s (µs)"].goal is None
    here = compare.figures("replay-runs", _replay(24_000, 12.0, "b"))
    rows = {r.figure: r for r in compare.compare(rec, here, "replay-runs")}
    assert rows["replay, busy: send lateness p99 at 20,000/s (ms)"].here.met is False
    assert rows["replay, busy: highest rate, every rate up to it under the limit (/s)"
                ].here.met is True


@pytest.mark.parametrize("name", compare.RECORDS)
def test_every_tracked_record_is_read_and_equals_itself(name: str) -> None:
    """The tracked records have the fields the comparison reads (a renamed field would leave
    a record silently out); a record against itself is 0% off everywhere. The twin: one
    figure moved by a fifth reads as beyond the tolerance."""
    doc = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
    figs = compare.figures(name, doc)
    assert len(figs) >= 4 and any(f.goal for f in figs.values())
    rows = compare.compare(figs, compare.figures(name, copy.deepcopy(doc)), name)
    assert len(rows) == len(figs) and all(r.within and r.change == 0 for r in rows)
    first = next(iter(figs))
    moved = dict(figs)
    moved[first] = compare.Figure(figs[first].median * 1.2, 0, 0)
    assert [r.within for r in compare.compare(figs, moved, name)].count(False) == 1


def test_main_names_both_machines_and_says_when_they_are_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, here = tmp_path / "rec", tmp_path / "here"
    _write(rec, "replay-runs", _replay(20_000, 2.0, "aaaaaaaa-1"))
    _write(here, "replay-runs", _replay(20_000, 2.1, "bbbbbbbb-2"))
    out = tmp_path / "c.json"
    argv = ["--recorded", str(rec), "--here", str(here), "--json", str(out)]
    assert compare.main(argv) == 0
    text = capsys.readouterr().out
    assert "recorded on AMD EPYC, kernel 6.18, boot aaaaaaaa" in text
    assert "here on AMD EPYC, kernel 6.18, boot bbbbbbbb" in text
    assert "not a second machine" not in text
    assert "3 of 3 figures within 15% of the recorded median; goals met here: 2 of 2." in text
    assert len(json.loads(out.read_text())["rows"]) == 3
    # the twin: the same boot on both sides is one machine, and says so
    _write(here, "replay-runs", _replay(20_000, 2.1, "aaaaaaaa-1"))
    assert compare.main(argv) == 0
    assert "(the same machine and boot: not a second machine)" in capsys.readouterr().out


def test_nothing_to_compare_is_exit_2_and_a_broken_record_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec, here = tmp_path / "rec", tmp_path / "here"
    argv = ["--recorded", str(rec), "--here", str(here)]
    assert compare.main(argv) == 2
    assert "replay-runs: no recorded results" in capsys.readouterr().err
    _write(rec, "replay-runs", _replay(20_000, 2.0, "a"))
    _write(here, "replay-runs", {"conditions": {"busy": {"sustained_rate": {"median": 1}}}})
    assert compare.main(argv) == 2
    assert "replay-runs: unreadable record (KeyError('min'))" in capsys.readouterr().err
