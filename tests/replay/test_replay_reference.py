"""The pure pipeline: filter, naming, reorder buffer, per-source client cache, counters."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import MalformedRow, ReplayInputError
from replay.flows import FlowRecord
from replay.ingest import ErrorLog
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, FlowFilter, StageCounters, Target, anonymise
from replay.reference import ClientCache, Namer, ReorderBuffer, WorkloadConfig, build_workload
from replay.workload import read_name_map, read_workload, write_workload


def flow(t: float, src: str, dst: str, dport: int = 443, proto: int = 6, size: int = 1000,
         sni: str | None = None) -> FlowRecord:
    return FlowRecord(t, t + 1, src, dst, 40000, dport, proto, 10, size, sni)


NAMES = {"192.0.2.1": "a.test", "192.0.2.2": "b.test"}

# Worked by hand: 10 flows -> 1 filtered (port 80), 1 filtered (UDP), 1 unnamed,
# 7 named: (c1,a) x3, (c2,a) x1, (c1,b) x2, (c2,b via SNI) x1.
# Client cache (whole trace): requests = distinct pairs = (c1,a) (c2,a) (c1,b) (c2,b) = 4,
# client hits = 7 - 4 = 3.
TRACE = [
    flow(0.0, "10.0.0.1", "192.0.2.1"),
    flow(1.0, "10.0.0.1", "192.0.2.1"),
    flow(2.0, "10.0.0.2", "192.0.2.1"),
    flow(3.0, "10.0.0.1", "192.0.2.2"),
    flow(4.0, "10.0.0.1", "192.0.2.9"),              # no name
    flow(5.0, "10.0.0.1", "192.0.2.1", dport=80),    # not 443
    flow(6.0, "10.0.0.1", "192.0.2.1", proto=17),    # not TCP
    flow(7.0, "10.0.0.2", "192.0.2.7", sni="b.test"),
    flow(8.0, "10.0.0.1", "192.0.2.2"),
    flow(900.0, "10.0.0.1", "192.0.2.1"),
]


def run(trace: list[FlowRecord], **kw: object) -> tuple[list, StageCounters]:  # type: ignore[type-arg]
    counters = StageCounters()
    events = list(build_workload(trace, Namer(NAMES), WorkloadConfig(**kw), counters))  # type: ignore[arg-type]
    return events, counters


def test_stage_counts_by_hand() -> None:
    events, c = run(TRACE)
    assert (c.flows_read, c.filtered_out, c.kept, c.named, c.unnamed_dropped) == (10, 2, 8, 7, 1)
    assert (c.notary_requests, c.client_cache_hits) == (4, 3)
    assert c.named_by == {"map": 6, "sni": 1}
    assert [e.kind for e in events].count(KIND_REQUEST) == 4
    assert [e.kind for e in events].count(KIND_CLIENT_HIT) == 3
    assert c.ssl_bytes_kept == 8000 and c.ssl_bytes_named == 7000
    assert [e.offset for e in events] == [0.0, 1.0, 2.0, 3.0, 7.0, 8.0, 900.0]


def test_client_cache_lifetime_turns_late_repeats_into_requests() -> None:
    # with a 60 s lifetime the (c1, a) flow at t=900 is a new request: 5 requests, 2 hits
    _, c = run(TRACE, client_cache_lifetime=60.0)
    assert (c.notary_requests, c.client_cache_hits) == (5, 2)


def test_client_hits_can_be_left_out_of_the_workload() -> None:
    events, c = run(TRACE, include_client_hits=False)
    assert len(events) == 4 and c.client_cache_hits == 3


def test_configurable_filter() -> None:
    _, c = run(TRACE, flow_filter=FlowFilter(frozenset({6}), frozenset({443, 80})))
    assert c.filtered_out == 1 and c.kept == 9


def test_client_cache_is_per_source_address() -> None:
    cache = ClientCache()
    assert cache.lookup("c1", "a.test", 443, 0.0) is False
    assert cache.lookup("c1", "a.test", 443, 1.0) is True
    assert cache.lookup("c2", "a.test", 443, 1.0) is False   # another client: its own cache
    assert cache.lookup("c1", "a.test", 8443, 1.0) is False  # another port: another entry


def test_client_cache_bound_evicts_least_recently_used() -> None:
    cache = ClientCache(max_entries=2)
    cache.lookup("c", "a", 443, 0)
    cache.lookup("c", "b", 443, 1)
    cache.lookup("c", "a", 443, 2)   # hit, a becomes most recent
    cache.lookup("c", "x", 443, 3)   # evicts b
    assert cache.evictions == 1 and len(cache) == 2
    assert cache.lookup("c", "a", 443, 4) is True
    assert cache.lookup("c", "b", 443, 5) is False


def test_client_cache_rejects_bad_settings() -> None:
    with pytest.raises(ReplayInputError):
        ClientCache(lifetime=0)
    with pytest.raises(ReplayInputError):
        ClientCache(max_entries=0)


def test_namer_precedence_sni_then_map_then_rdns() -> None:
    namer = Namer({"192.0.2.1": "map.test"}, {"192.0.2.1": "ptr.test", "192.0.2.5": "ptr5.test"})
    assert namer.name(flow(0, "10.0.0.1", "192.0.2.1", sni="sni.test")) == ("sni.test", "sni")
    assert namer.name(flow(0, "10.0.0.1", "192.0.2.1")) == ("map.test", "map")
    assert namer.name(flow(0, "10.0.0.1", "192.0.2.5")) == ("ptr5.test", "rdns")
    assert namer.name(flow(0, "10.0.0.1", "192.0.2.6")) is None


def test_reorder_buffer_sorts_within_window_and_reports_late_flows() -> None:
    buf = ReorderBuffer(window=10)
    out: list[float] = []
    late: list[float] = []
    for t in (5, 3, 8, 12, 4, 30, 1):
        released, dropped = buf.push(flow(t, "10.0.0.1", "192.0.2.1"))
        out += [r.start for r in released]
        late += [r.start for r in dropped]
    out += [r.start for r in buf.flush()]
    assert out == [3, 4, 5, 8, 12, 30]
    assert late == [1]  # older than flows already released


def test_out_of_order_input_is_replayed_in_time_order() -> None:
    events, c = run(list(reversed(TRACE[:4])))
    assert [e.offset for e in events] == [0.0, 1.0, 2.0, 3.0]
    assert c.late_dropped == 0


def test_targets_set_port_and_fingerprint() -> None:
    c = StageCounters()
    events = list(build_workload(TRACE[:1], Namer(NAMES), WorkloadConfig(), c,
                                 {"a.test": Target(18443, "AA:BB")}))
    assert (events[0].port, events[0].fingerprint) == (18443, "AA:BB")


def test_anonymise_is_stable_and_keyed() -> None:
    assert anonymise("10.0.0.1", b"k1") == anonymise("10.0.0.1", b"k1")
    assert anonymise("10.0.0.1", b"k1") != anonymise("10.0.0.1", b"k2")
    assert "10.0.0.1" not in anonymise("10.0.0.1", b"k1")


def test_workload_file_round_trip(tmp_path: Path) -> None:
    events, _ = run(TRACE)
    path = tmp_path / "w.csv"
    assert write_workload(events, path) == len(events)
    assert list(read_workload(path)) == events


def test_workload_file_malformed_rows(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("offset,kind,client,host,port,fingerprint,ssl_bytes\n"
                    "0.5,request,c1,a.test,443,AA,10\n"
                    "0.7,teleport,c1,a.test,443,AA,10\n"
                    "0.9,request,c1,a.test,99999,AA,10\n")
    with pytest.raises(MalformedRow) as info:
        list(read_workload(path))
    assert info.value.line == 3
    errors = ErrorLog()
    assert len(list(read_workload(path, errors))) == 1
    assert errors.count == 2


_FIELDS = [
    ["0.5", "1e-3", "7", "-1", "nan", "x", "", " 2.5"],
    ["request", "client-hit", "teleport", "", "Request"],
    ["c1", "", "c,2", "c\"3"],
    ["a.test", "A.Test.", "b.test", "", "0", "-", "bad host", "x" * 300, "\u00e9.test", "a..b"],
    ["443", "1", "65535", "0", "65536", "-1", "x", "4_43", " 80"],
    ["AA", "", " AA:BB ", "zz"],
    ["10", "0", "-5", "x", "1.5"],
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(*(st.sampled_from(f[:1] * 4 + f) for f in _FIELDS)) | st.lists(
    st.sampled_from(["1", "request", "a.test"]), max_size=9), max_size=40))
def test_workload_reader_agrees_with_the_row_checker(tmp_path_factory: pytest.TempPathFactory,
                                                     rows: list[list[str]]) -> None:
    """The CSV reader (which remembers checked hosts) yields what checking each row on its own
    yields: the same events, and the same errors on the same lines, for hostile fields and
    short and long rows alike. The twin: one changed field changes what is read."""
    import csv

    from replay.workload import WORKLOAD_COLUMNS, _event

    path = tmp_path_factory.mktemp("w") / "w.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(WORKLOAD_COLUMNS)
        w.writerows(list(r) for r in rows if list(r))
    events, problems = [], []
    for line, row in enumerate((list(r) for r in rows if list(r)), 2):
        try:
            events.append(_event(row))
        except ValueError as exc:
            problems.append((line, str(exc)))
    errors = ErrorLog(keep=1000)
    assert list(read_workload(path, errors)) == events
    assert errors.count == len(problems)
    for message, (line, problem) in zip(errors.messages, problems, strict=True):
        assert f":{line}:" in message and problem in message, (message, line, problem)


def test_name_map_file(tmp_path: Path) -> None:
    path = tmp_path / "names.txt"
    path.write_text("# comment\n192.0.2.1 a.test\n192.0.2.2,B.Test.\nnot-an-ip x.test\n")
    errors = ErrorLog()
    assert read_name_map(path, errors) == {"192.0.2.1": "a.test", "192.0.2.2": "b.test"}
    assert errors.count == 1 and ":4:" in errors.messages[0]


_MAP_LINES = st.sampled_from([
    "192.0.2.1 a.test", "192.0.2.2,b.test", "198.51.100.7 www.x-y.test", "10.0.0.1 *.wild.test",
    "192.0.2.1 later.test", "# a comment", "#", "", "  ", "192.0.2.3  two-spaces.test",
    "192.0.2.4 Upper.Test", "192.0.2.5 dot.test.", "192.0.2.6 0", "192.0.2.7 -",
    "192.0.2.6 six.test", "192.0.2.7 seven.test",
    "192.0.02.8 zero.test", "256.1.1.1 big.test", "2001:db8::1 six.test", "192.0.2.9",
    "192.0.2.10 a.test extra", "192.0.2.11 a.test # note", "192.0.2.12 " + "l" * 64 + ".test",
    "192.0.2.13 " + ".".join(["abcdefgh"] * 29), "192.0.2.14\ttab.test",
    "192.0.2.15 caf\u00e9.test",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_MAP_LINES, max_size=12), st.sampled_from(["\n", "\r\n", "\r"]),
       st.booleans())
def test_name_map_read_in_one_pass_as_line_by_line(tmp_path_factory: pytest.TempPathFactory,
                                                   lines: list[str], newline: str,
                                                   final: bool) -> None:
    """A map of plain lines is read by one regular expression over the text; any map gives
    what the line-by-line rules give (entries, and the same errors at the same lines)."""
    from replay.workload import _name_map_lines

    path = tmp_path_factory.mktemp("map") / "names.txt"
    path.write_bytes((newline.join(lines) + (newline if final and lines else ""))
                     .encode("utf-8"))
    fast_errors, slow_errors = ErrorLog(), ErrorLog()
    fast = read_name_map(path, fast_errors)
    with path.open("r", encoding="utf-8", newline="") as fh:
        slow = _name_map_lines(fh, path, slow_errors)
    assert fast == slow and list(fast.items()) == list(slow.items())
    assert fast_errors.messages == slow_errors.messages


def test_name_map_not_utf8_is_one_clear_error(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A map that is not UTF-8 text: `replay workload` says so in one line (exit 2) and
    writes nothing; twin: the same map in UTF-8 is read."""
    from replay.cli import main

    flows = tmp_path / "flows.csv"
    flows.write_text("start,end,src,dst,sport,dport,proto,packets,bytes,sni\n"
                     "1366563600.0,1366563601.0,10.0.0.1,192.0.2.1,40000,443,6,1,100,\n")
    names = tmp_path / "names.txt"
    names.write_bytes(b"192.0.2.1 a.test\n192.0.2.2 b\xff.test\n")
    out = tmp_path / "w.csv"
    assert main(["workload", "-q", "--names", str(names), "-o", str(out), str(flows)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay: error: ") and "not UTF-8" in err and len(err.splitlines()) == 1
    assert not out.exists()
    names.write_bytes(b"192.0.2.1 a.test\n192.0.2.2 b.test\n")
    assert main(["workload", "-q", "--names", str(names), "-o", str(out), str(flows)]) == 0
    assert "a.test" in out.read_text()


def test_name_map_one_pass_only_for_plain_lines() -> None:
    from replay.workload import _plain_name_map

    plain = "# map\n192.0.2.1 a.test\r\n192.0.2.2,b.test\n192.0.2.1 c.test"
    assert _plain_name_map(plain) == {"192.0.2.1": "c.test", "192.0.2.2": "b.test"}
    # twin: one line in another form (or an empty line) sends the map line by line
    for odd in ("192.0.2.3 D.test", "", "192.0.2.3 0", "192.0.2.9 -\n192.0.2.9 nine.test",
                "192.0.2.3 a.test x",
                "192.0.2.3",
                "192.0.02.3 a.test", "192.0.2.3 a.test\r192.0.2.4 b.test"):
        assert _plain_name_map(plain + "\n" + odd + "\n") is None, odd


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1000), st.floats(0, 50)), max_size=60))
def test_reorder_buffer_property(items: list[tuple[float, float]]) -> None:
    """Flows displaced by at most the window come out complete and in start order."""
    # arrival order: by (start + displacement); displacement <= 50 < window
    arrivals = sorted(items, key=lambda x: x[0] + x[1])
    buf = ReorderBuffer(window=60)
    out: list[float] = []
    for start, _ in arrivals:
        released, late = buf.push(flow(start, "10.0.0.1", "192.0.2.1"))
        assert late == []
        out += [r.start for r in released]
    out += [r.start for r in buf.flush()]
    assert out == sorted(s for s, _ in items)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["a", "b"]),
                          st.floats(0, 100)), max_size=50))
def test_client_cache_requests_are_distinct_pairs(events: list[tuple[str, str, float]]) -> None:
    cache = ClientCache()
    misses = sum(not cache.lookup(c, h, 443, t) for c, h, t in sorted(events, key=lambda e: e[2]))
    assert misses == len({(c, h) for c, h, _ in events})
