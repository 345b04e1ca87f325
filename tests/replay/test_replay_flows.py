"""Pure flow parsing: timestamps, the three CSV layouts, malformed rows."""

from __future__ import annotations

import pytest

from replay.errors import MalformedRow, ReplayInputError
from replay.flows import (
    FlowRecord,
    detect_layout,
    format_canonical,
    nfdump_fmt_layout,
    parse_count,
    parse_duration,
    parse_time,
    utc_offset_zone,
)


def fields(text: str, sep: str = ",") -> list[str]:
    return text.split(sep)


LEGACY_HEADER = fields(
    "ts,te,td,sa,da,sp,dp,pr,flg,fwd,stos,ipkt,ibyt,opkt,obyt,in,out,sas,das,smk,"
                 "dmk,dtos,dir,nh,nhb,svln,dvln,ismc,odmc,idmc,osmc,mpls1,mpls2,mpls3,mpls4,"
                 "mpls5,mpls6,mpls7,mpls8,mpls9,mpls10,cl,sl,al,ra,eng,exid,tr")
# A row as nfdump 1.7.1 printed it for a flow made in a test run (second-resolution times).
LEGACY_ROW = fields(
    "2013-04-21 17:00:00,2013-04-21 17:00:00,0.003,10.0.0.1,93.184.216.34,40000,443,"
              "TCP,...AP.SF,0,0,4,260,0,0,0,0,0,0,0,0,0,0,0.0.0.0,0.0.0.0,0,0,00:00:00:00:00:00,"
              "00:00:00:00:00:00,00:00:00:00:00:00,00:00:00:00:00:00,0-0-0,0-0-0,0-0-0,0-0-0,"
              "0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,0-0-0,    0.000,    0.000,    0.000,0.0.0.0,17/1,0,"
              "2026-11-22 04:59:10.907")
NEW_HEADER = "firstSeen,duration,proto,srcAddr,srcPort,dstAddr,dstPort,packets,bytes,flows"
T0 = 1366563600.0  # 2013-04-21 17:00:00 UTC


def test_parse_time_forms() -> None:
    assert parse_time("2013-04-21 17:00:00") == T0
    assert parse_time("2013-04-21 17:00:00.250") == T0 + 0.25
    assert parse_time("2013-04-21T17:00:00Z") == T0
    assert parse_time("2013-04-21T19:00:00+02:00") == T0
    assert parse_time("1366563600.5") == T0 + 0.5
    assert parse_time("1366563600500") == T0 + 0.5  # epoch milliseconds (csv-fast)
    # a naive time written in UTC+2 is two hours earlier in UTC
    assert parse_time("2013-04-21 19:00:00", utc_offset_zone(2)) == T0


@pytest.mark.parametrize("bad", ["", "yesterday", "2013-13-01 00:00:00", "-5", "1e300"])
def test_parse_time_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_time(bad)


def test_durations_and_counts() -> None:
    assert parse_duration("00:00:01.500") == 1.5
    assert parse_duration("2.25") == 2.25
    assert parse_count("1.5 M") == 1_500_000
    assert parse_count("42") == 42
    with pytest.raises(ValueError):
        parse_duration("-1")
    with pytest.raises(ValueError):
        parse_count("-3")


@pytest.mark.parametrize("bad", ["1e99999T", "inf", "nan", "1e400"])
def test_counts_must_be_finite(bad: str) -> None:
    # "1e99999T" is what the fuzzer found: int(inf) raised OverflowError, not ValueError
    with pytest.raises(ValueError):
        parse_count(bad)
    assert parse_count("1e3 K") == 1_000_000  # twin: a finite exponent form is a counter


@pytest.mark.parametrize("bad", ["inf", "nan", "00:00:inf", "-1:00:00"])
def test_durations_must_be_finite_and_non_negative(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)
    assert parse_duration("01:00:00") == 3600  # twin


def test_legacy_layout_row() -> None:
    layout = detect_layout(LEGACY_HEADER)
    assert layout.name == "nfdump-legacy"
    rec = layout.parse(LEGACY_ROW, "f.csv", 2)
    assert rec == FlowRecord(T0, T0 + 0.003, "10.0.0.1", "93.184.216.34", 40000, 443, 6, 4, 260)


def test_new_layout_row() -> None:
    layout = detect_layout(fields(NEW_HEADER))
    assert layout.name == "nfdump-new"
    rec = layout.parse(fields("2013-04-21 17:00:00.123,1.500,6,10.0.0.2,40001,2001:db8::1,"
                              "443,7,900,1"), "f.csv", 2)
    assert rec.start == pytest.approx(T0 + 0.123)
    assert rec.end == pytest.approx(T0 + 1.623)
    assert (rec.dst, rec.dport, rec.proto, rec.packets, rec.bytes) == (
        "2001:db8::1", 443, 6, 7, 900)


def test_canonical_round_trip() -> None:
    rec = FlowRecord(T0 + 0.5, T0 + 2, "10.0.0.3", "198.18.0.9", 50000, 443, 6, 10, 12345,
                     "www.example.test")
    header = fields("start,end,src,dst,sport,dport,proto,packets,bytes,sni")
    layout = detect_layout(header)
    assert layout.name == "canonical"
    assert layout.parse(format_canonical(rec), "c.csv", 2) == rec


def test_fmt_layout_row() -> None:
    row = fields("2013-04-21 17:00:02.123|2013-04-21 17:00:02.126|        10.0.0.1|"
                 "         1.2.3.4| 40002|    80|TCP  |       4|     260|       0", "|")
    rec = nfdump_fmt_layout().parse(row, "x (nfdump)", 1)
    assert rec.start == pytest.approx(T0 + 2.123)
    assert (rec.src, rec.dst, rec.dport, rec.bytes) == ("10.0.0.1", "1.2.3.4", 80, 260)


@pytest.mark.parametrize(("row", "reason"), [
    ("2013-04-21 17:00:00.1,1.0,6,10.0.0.1,1,not-an-ip,443,1,1,1", "does not appear"),
    ("2013-04-21 17:00:00.1,1.0,6,10.0.0.1,1", "expected at least"),
    ("2013-04-21 17:00:00.1,1.0,6,10.0.0.1,99999,10.0.0.2,443,1,1,1", "port out of range"),
    ("2013-04-21 17:00:00.1,1.0,FOO,10.0.0.1,1,10.0.0.2,443,1,1,1", "unknown protocol"),
    ("2013-04-21 17:00:00.1,-1.0,6,10.0.0.1,1,10.0.0.2,443,1,1,1", "negative duration"),
])
def test_malformed_rows_carry_source_and_line(row: str, reason: str) -> None:
    layout = detect_layout(fields(NEW_HEADER))
    with pytest.raises(MalformedRow) as info:
        layout.parse(fields(row), "trace.csv", 17)
    assert info.value.source == "trace.csv"
    assert info.value.line == 17
    assert reason in info.value.reason


def test_canonical_end_before_start_is_malformed() -> None:
    layout = detect_layout(fields("start,end,src,dst,sport,dport,proto,packets,bytes"))
    with pytest.raises(MalformedRow, match="ends before it starts"):
        layout.parse(["10", "5", "10.0.0.1", "10.0.0.2", "1", "443", "6", "1", "1"], "c", 3)


def test_unknown_header_is_bad_input() -> None:
    with pytest.raises(ReplayInputError, match="unrecognised"):
        detect_layout(["when", "from", "to"])
