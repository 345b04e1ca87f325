"""One-way flows: the two directions of a connection become one HTTPS flow with both byte
counts, from real nfpcapd capture files and from both nfdump CSV layouts."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest
from replay_support import write_pcap_exchange

from replay.flows import LEGACY_HEADER, NEW_HEADER, FlowRecord, nfdump_legacy_row, nfdump_new_row
from replay.ingest import ErrorLog, read_flows
from replay.model import FlowFilter, StageCounters
from replay.reference import FlowPairer, Namer, WorkloadConfig, build_workload

T0 = 1366563600.0
CONNS = [  # start, client, server, client port, server port, reply bytes
    (T0 + 0.5, "10.0.0.1", "93.184.216.34", 40000, 443, 1400),
    (T0 + 1.5, "10.0.0.2", "93.184.216.35", 40001, 443, 900),
    (T0 + 2.5, "10.0.0.1", "93.184.216.34", 40002, 443, 1200),
]
NAMES = {"93.184.216.34": "a.test", "93.184.216.35": "b.test"}


def flow(start: float, src: str, dst: str, sport: int, dport: int, nbytes: int,
         end: float | None = None) -> FlowRecord:
    return FlowRecord(start, start + 0.05 if end is None else end, src, dst, sport, dport, 6,
                      4, nbytes)


def halves() -> list[FlowRecord]:
    out = []
    for start, c, srv, cp, sp, reply in CONNS:
        out.append(flow(start, c, srv, cp, sp, 300))
        out.append(flow(start + 0.01, srv, c, sp, cp, 200 + reply))
    return out


def workload(records: list[FlowRecord]) -> tuple[list[object], StageCounters]:
    counters = StageCounters()
    events = list(build_workload(records, Namer(NAMES), WorkloadConfig(), counters))
    return events, counters


def test_both_halves_become_one_flow_with_both_byte_counts() -> None:
    events, c = workload(halves())
    assert c.flows_read == 6 and c.paired == 3 and c.filtered_out == 0
    assert c.kept == 3 and c.notary_requests + c.client_cache_hits == 3
    assert c.ssl_bytes_kept == sum(300 + 200 + r for *_, r in CONNS)
    assert [e.ssl_bytes for e in events] == [300 + 200 + r for *_, r in CONNS]


def test_twin_halves_whose_tuples_do_not_reverse_are_not_paired() -> None:
    # the server halves name another client port: not the same connection, nothing merged;
    # each lone server half counts as a connection of its own
    recs = []
    for r in halves():
        if r.sport == 443:
            r = FlowRecord(r.start, r.end, r.src, r.dst, r.sport, r.dport + 1, r.proto,
                           r.packets, r.bytes)
        recs.append(r)
    _, c = workload(recs)
    assert c.paired == 0 and c.reverse_only == 3 and c.kept == 6


def test_a_lone_server_half_is_turned_around_and_kept() -> None:
    lone = flow(T0, "93.184.216.34", "10.0.0.9", 443, 50000, 5000)
    events, c = workload([lone])
    assert c.reverse_only == 1 and c.kept == 1 and c.paired == 0
    assert events[0].client != "" and events[0].host == "a.test"


def test_halves_of_different_connections_are_not_paired() -> None:
    pairer = FlowPairer(FlowFilter(), window=120)
    a = flow(T0, "10.0.0.1", "93.184.216.34", 40000, 443, 300)
    # same 5-tuple reversed, but ten minutes later: another connection (port reuse)
    b = flow(T0 + 600, "93.184.216.34", "10.0.0.1", 443, 40000, 900)
    out = pairer.push(a) + pairer.push(b) + pairer.flush()
    assert pairer.paired == 0 and len(out) == 2
    assert sorted(r.bytes for r in out) == [300, 900]


def test_other_ports_pass_through() -> None:
    pairer = FlowPairer(FlowFilter())
    dns = FlowRecord(T0, T0 + 0.01, "10.0.0.1", "8.8.8.8", 5353, 53, 17, 1, 80)
    assert pairer.push(dns) == [dns]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


@pytest.mark.parametrize("layout", ["legacy", "new"])
def test_pairing_from_both_nfdump_csv_layouts(tmp_path: Path, layout: str) -> None:
    path = tmp_path / f"{layout}.csv"
    fmt = nfdump_legacy_row if layout == "legacy" else nfdump_new_row
    _write_csv(path, LEGACY_HEADER if layout == "legacy" else NEW_HEADER,
               [fmt(r) for r in halves()])
    errors = ErrorLog()
    events, c = workload(list(read_flows([path], errors)))
    assert errors.count == 0
    assert c.paired == 3 and c.kept == 3
    assert c.ssl_bytes_kept == sum(300 + 200 + r for *_, r in CONNS)


@pytest.mark.skipif(shutil.which("nfpcapd") is None or shutil.which("nfdump") is None,
                    reason="nfdump/nfpcapd not installed (scripts/install-system-deps)")
def test_pairing_a_real_nfpcapd_capture(tmp_path: Path) -> None:
    pcap = tmp_path / "both-ways.pcap"
    write_pcap_exchange(pcap, CONNS)
    out = tmp_path / "flows"
    out.mkdir()
    subprocess.run(["nfpcapd", "-r", str(pcap), "-w", str(out)], check=True,
                   capture_output=True, timeout=60)
    files = sorted(p for p in out.rglob("nfcapd.*") if p.is_file())
    errors = ErrorLog()
    records = list(read_flows(files, errors))
    assert errors.count == 0 and len(records) == 6  # one flow per direction
    events, c = workload(records)
    assert c.paired == 3 and c.kept == 3 and c.filtered_out == 0
    # IP-layer bytes of both directions: 3 client packets (2 empty, 100 bytes of data) and
    # 3 server packets (the reply) per connection, 40 bytes of headers each
    assert c.ssl_bytes_kept == sum(6 * 40 + 100 + r for *_, r in CONNS)
