"""Ingest: real nfdump capture files made in the test run, both CSV layouts, malformed rows."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from replay_support import write_pcap

from replay.errors import MalformedRow, ReplayIOError
from replay.ingest import ErrorLog, read_flows, read_nfdump_file, sniff_format

T0 = 1366563600.0
FLOWS = [
    (T0 + 0.250, "10.0.0.1", "93.184.216.34", 40000, 443, 6),
    (T0 + 1.500, "10.0.0.2", "93.184.216.35", 40001, 443, 6),
    (T0 + 2.750, "10.0.0.1", "1.2.3.4", 40002, 80, 6),
    (T0 + 3.000, "10.0.0.3", "8.8.8.8", 5353, 53, 17),
]

needs_nfdump = pytest.mark.skipif(
    shutil.which("nfpcapd") is None or shutil.which("nfdump") is None,
    reason="nfdump/nfpcapd not installed (Debian package nfdump; scripts/install-system-deps)")


@pytest.fixture()
def capture(tmp_path: Path) -> Path:
    """A real nfdump capture file: a struct-built pcap converted by nfpcapd."""
    if shutil.which("nfpcapd") is None:
        pytest.skip("nfpcapd not installed (Debian package nfdump)")
    pcap = tmp_path / "trace.pcap"
    write_pcap(pcap, FLOWS)
    out = tmp_path / "flows"
    out.mkdir()
    subprocess.run(["nfpcapd", "-r", str(pcap), "-w", str(out)], check=True,
                   capture_output=True, timeout=60)
    files = sorted(p for p in out.rglob("nfcapd.*") if p.is_file())
    assert len(files) == 1
    return files[0]


@needs_nfdump
def test_capture_file_read_through_nfdump_fmt(capture: Path) -> None:
    assert sniff_format(capture) == "nfdump"
    errors = ErrorLog()
    recs = sorted(read_flows([capture], errors), key=lambda r: r.start)
    assert errors.count == 0
    assert [(r.src, r.dst, r.sport, r.dport, r.proto) for r in recs] == [
        (s, d, sp, dp, pr) for _, s, d, sp, dp, pr in FLOWS]
    # fmt output keeps milliseconds, in UTC whatever the local zone
    assert [round(r.start - T0, 3) for r in recs] == [0.25, 1.5, 2.75, 3.0]
    tcp = recs[0]
    assert tcp.packets == 4
    assert tcp.end - tcp.start == pytest.approx(0.03, abs=0.002)
    assert tcp.bytes == 4 * 40 + 100  # IP-layer bytes: 4 IP+TCP headers and 100 of payload


@needs_nfdump
def test_capture_times_stay_utc_under_another_local_zone(
        capture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    recs = sorted(read_flows([capture], ErrorLog()), key=lambda r: r.start)
    assert round(recs[0].start - T0, 3) == 0.25


@needs_nfdump
def test_capture_file_read_through_nfdump_csv(capture: Path) -> None:
    errors = ErrorLog()
    recs = sorted(read_nfdump_file(capture, errors, output="csv"), key=lambda r: r.start)
    assert errors.count == 0
    assert len(recs) == len(FLOWS)
    # nfdump's own CSV (legacy layout on 1.7.4 and older) has whole-second start times
    assert [int(r.start - T0) for r in recs] == [0, 1, 2, 3]
    assert recs[0].dst == "93.184.216.34"


@needs_nfdump
def test_corrupt_capture_file_fails_as_io_error(tmp_path: Path) -> None:
    bad = tmp_path / "nfcapd.bad"
    bad.write_bytes(b"\x0c\xa5" + b"\x00" * 10)
    with pytest.raises(ReplayIOError):
        list(read_flows([bad], ErrorLog()))


def test_missing_nfdump_tool_is_io_error(tmp_path: Path) -> None:
    f = tmp_path / "nfcapd.x"
    f.write_bytes(b"\x0c\xa5")
    with pytest.raises(ReplayIOError, match="not found"):
        list(read_nfdump_file(f, ErrorLog(), nfdump="no-such-nfdump-tool"))


LEGACY = """ts,te,td,sa,da,sp,dp,pr,flg,fwd,stos,ipkt,ibyt,opkt,obyt
2013-04-21 17:00:00,2013-04-21 17:00:01,1.250,10.0.0.1,93.184.216.34,40000,443,TCP,,0,0,4,260,3,100
2013-04-21 17:00:02,2013-04-21 17:00:02,0.003,10.0.0.2,bogus,40001,443,TCP,,0,0,4,260,0,0
2013-04-21 17:00:03,2013-04-21 17:00:03,0.003,10.0.0.2,93.184.216.35,40001,443,TCP,,0,0,4,260,0,0

Summary
flows,bytes,packets,avg_bps,avg_pps,avg_bpp
2,780,12,3115,5,65
"""

NEW = """firstSeen,duration,proto,srcAddr,srcPort,dstAddr,dstPort,packets,bytes,flows
2013-04-21 17:00:00.500,1.000,6,10.0.0.1,40000,93.184.216.34,443,4,260,1
2013-04-21 17:00:01.500,1.000,6,10.0.0.1,40000,93.184.216.34
2013-04-21 17:00:02.500,1.000,6,10.0.0.1,40000,93.184.216.34,443,4,260,1
"""


def test_legacy_csv_file_with_malformed_row(tmp_path: Path) -> None:
    path = tmp_path / "legacy.csv"
    path.write_text(LEGACY)
    seen: list[str] = []
    errors = ErrorLog(emit=seen.append)
    recs = list(read_flows([path], errors))
    assert len(recs) == 2
    assert recs[0].bytes == 360 and recs[0].packets == 7
    assert recs[0].end - recs[0].start == pytest.approx(1.25)
    assert errors.count == 1
    assert errors.messages[0].startswith(f"{path}:3:")
    assert seen and "legacy.csv:3" in seen[0]


def test_new_csv_file_with_malformed_row(tmp_path: Path) -> None:
    path = tmp_path / "new.csv"
    path.write_text(NEW)
    errors = ErrorLog()
    recs = list(read_flows([path], errors))
    assert [r.start - T0 for r in recs] == [0.5, 2.5]
    assert errors.count == 1 and f"{path}:3:" in errors.messages[0]


def test_strict_mode_fails_on_first_malformed_row(tmp_path: Path) -> None:
    path = tmp_path / "new.csv"
    path.write_text(NEW)
    with pytest.raises(MalformedRow) as info:
        list(read_flows([path], ErrorLog(strict=True)))
    assert info.value.line == 3


def test_error_log_keeps_a_bounded_number_of_messages(tmp_path: Path) -> None:
    path = tmp_path / "many.csv"
    rows = ["start,end,src,dst,sport,dport,proto,packets,bytes"]
    rows += ["x,1,10.0.0.1,10.0.0.2,1,443,6,1,1"] * 50
    path.write_text("\n".join(rows) + "\n")
    errors = ErrorLog(keep=5)
    assert list(read_flows([path], errors)) == []
    assert errors.count == 50
    assert len(errors.messages) == 5


def test_line_length_bound_at_the_limit_and_one_past(tmp_path: Path) -> None:
    from replay.ingest import MAX_LINE_CHARS

    def row(total: int) -> str:
        # a valid row whose bytes column is padded with leading zeros to ``total`` chars
        base = "1,2,10.0.0.1,10.0.0.2,1,443,6,1,1"
        return base[:-1] + "0" * (total - len(base)) + "1"

    path = tmp_path / "long.csv"
    at_limit, past = row(MAX_LINE_CHARS), row(MAX_LINE_CHARS + 1)
    assert (len(at_limit), len(past)) == (MAX_LINE_CHARS, MAX_LINE_CHARS + 1)
    path.write_text("\n".join(["start,end,src,dst,sport,dport,proto,packets,bytes",
                               at_limit, past]) + "\n")
    errors = ErrorLog()
    assert list(read_flows([path], errors)) == []
    # at the limit the line is read, then its over-long field is refused; one past the
    # limit the line itself is refused
    assert errors.count == 2
    assert "field too long" in errors.messages[0] and ":2:" in errors.messages[0]
    assert "line too long" in errors.messages[1] and ":3:" in errors.messages[1]
