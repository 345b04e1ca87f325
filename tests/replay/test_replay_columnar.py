"""The columnar workload engine against the per-row pipeline, its test oracle: identical
workload rows and stage counters on the synthetic hour (every CSV layout), on real nfcapd
files, on rows in every unusual form, and on malformed inputs; plus what only the engine
does (many files as one trace, Parquet, several cores, nothing half-written)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from replay_support import write_pcap_exchange

from replay import columnar
from replay.cli import main
from replay.columnar.output import plain_text
from replay.errors import MalformedRow, ReplayIOError
from replay.flows import CANONICAL_COLUMNS, LEGACY_HEADER, utc_offset_zone
from replay.ingest import ErrorLog, read_flows
from replay.model import StageCounters, Target
from replay.reference import Namer, WorkloadConfig, build_workload
from replay.synth import SynthConfig, SyntheticTrace, write_synthetic
from replay.workload import read_name_map, read_workload, write_workload

COMPARED = ("flows_read", "malformed", "paired", "reverse_only", "filtered_out",
            "late_dropped", "kept", "named", "unnamed_dropped", "client_cache_hits",
            "client_cache_evictions", "notary_requests", "ssl_bytes_kept", "ssl_bytes_named",
            "first_start", "last_start", "named_by")
needs_nfdump = pytest.mark.skipif(
    shutil.which("nfpcapd") is None or shutil.which("nfdump") is None,
    reason="nfdump/nfpcapd not installed (scripts/install-system-deps)")


def reference(inputs: list[Path], out: Path, names: dict[str, str],
              targets: dict[str, Target] | None = None, **kw: Any,
              ) -> tuple[StageCounters, ErrorLog]:
    tz = kw.pop("tz", None)
    errors = ErrorLog()
    counters = StageCounters()
    records = read_flows(inputs, errors, tz=tz) if tz else read_flows(inputs, errors)
    write_workload(build_workload(records, Namer(names), WorkloadConfig(**kw), counters,
                                  targets or {}), out)
    counters.malformed = errors.count
    return counters, errors


def engine(inputs: list[Path], out: Path, names: dict[str, str],
           targets: dict[str, Target] | None = None, jobs: int = 1, **kw: Any,
           ) -> tuple[StageCounters, ErrorLog]:
    errors = ErrorLog()
    if kw.get("tz") is None:
        kw.pop("tz", None)
    counters, _ = columnar.build(inputs, out, columnar.EngineConfig(
        jobs=jobs, name_map=names, targets=targets or {}, **kw), errors)
    return counters, errors


def same(a: StageCounters, b: StageCounters) -> dict[str, tuple[object, object]]:
    da, db = a.as_dict(), b.as_dict()
    return {k: (da[k], db[k]) for k in COMPARED if da[k] != db[k]}


@pytest.fixture(scope="module")
def hour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic trace in all three CSV layouts (scale 0.05, ten minutes)."""
    d = tmp_path_factory.mktemp("hour")
    write_synthetic(SyntheticTrace(SynthConfig(seed=3, scale=0.05, duration=600)), d,
                    ["canonical", "nfdump-legacy", "nfdump-new"])
    return d


@pytest.mark.parametrize("flows", ["flows.csv", "flows-nfdump-legacy.csv",
                                   "flows-nfdump-new.csv"])
def test_synthetic_trace_identical_rows_and_counters(hour: Path, tmp_path: Path,
                                                     flows: str) -> None:
    names = read_name_map(hour / "names.txt")
    ref, eng = tmp_path / "ref.csv", tmp_path / "eng.csv"
    c_ref, _ = reference([hour / flows], ref, names)
    c_eng, _ = engine([hour / flows], eng, names)
    assert c_ref.notary_requests > 1000
    assert same(c_ref, c_eng) == {}
    assert ref.read_bytes() == eng.read_bytes()


def test_two_cores_give_the_same_workload(hour: Path, tmp_path: Path) -> None:
    names = read_name_map(hour / "names.txt")
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    c1, _ = engine([hour / "flows.csv"], one, names, jobs=1)
    c2, _ = engine([hour / "flows.csv"], two, names, jobs=2)
    assert same(c1, c2) == {}
    assert one.read_bytes() == two.read_bytes()


def test_client_cache_lifetime(hour: Path, tmp_path: Path) -> None:
    names = read_name_map(hour / "names.txt")
    c_ref, _ = reference([hour / "flows.csv"], tmp_path / "r.csv", names,
                         client_cache_lifetime=60.0)
    c_eng, _ = engine([hour / "flows.csv"], tmp_path / "e.csv", names,
                      client_cache_lifetime=60.0)
    assert same(c_ref, c_eng) == {}
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    # twin: a lifetime makes more notary requests than the whole-trace cache
    c_all, _ = engine([hour / "flows.csv"], tmp_path / "a.csv", names)
    assert c_eng.notary_requests > c_all.notary_requests


UNUSUAL = "\n".join([
    ",".join(CANONICAL_COLUMNS),
    "1366563600.250,1366563601.250,10.0.0.1,198.18.0.1,40000,443,6,4,260,",
    "# a comment line",
    "",
    "2013-04-21T17:00:01+00:00,2013-04-21T17:00:02Z,10.0.0.2,198.18.0.2,40001,443,TCP,4,1.2 K,",
    "1366563602000,1366563603000,10.0.0.3,198.18.0.1,40002,443,6,4,260,A.Test.",
    "1366563603,1366563604,::FFFF:10.0.0.4,2001:DB8::1,40003,443,6,4,260,",
    "1366563604,1366563605,10.0.0.5,198.18.0.2,40004,443,6,4,260,-",
    "1366563605,1366563604,10.0.0.6,198.18.0.2,40005,443,6,4,260,",
    "1366563606,1366563607,10.0.0.7,198.18.0.300,40006,443,6,4,260,",
    "1366563607,1366563608,10.0.0.8,198.18.0.2,40007,443,6,4,260,bad_name!",
    "1366563608,1366563609,10.0.0.9,198.18.0.2,99999,443,6,4,260,",
    "1366563609,1366563610,10.0.0.10,198.18.0.2",
    "1e9,1366563611,10.0.0.11,198.18.0.2,40010,443,6,4,260,",
    "1366563612,1366563613,10.0.0.12,198.18.0.2,40011,443,6,01,0260,b.test",
]) + "\n"
UNUSUAL_NAMES = {"198.18.0.1": "one.test", "198.18.0.2": "two.test", "2001:db8::1": "v6.test"}


def test_every_unusual_form_and_malformed_row_as_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "unusual.csv"
    path.write_text(UNUSUAL)
    c_ref, e_ref = reference([path], tmp_path / "r.csv", UNUSUAL_NAMES)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", UNUSUAL_NAMES)
    assert same(c_ref, c_eng) == {}
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    assert e_ref.messages == e_eng.messages  # the same words, files and lines
    assert e_eng.count == 5 and any(":10:" in m for m in e_eng.messages)


def test_naive_times_in_another_zone(hour: Path, tmp_path: Path) -> None:
    names = read_name_map(hour / "names.txt")
    tz = utc_offset_zone(2.0)
    for flows in ("flows-nfdump-legacy.csv", "flows-nfdump-new.csv"):
        c_ref, _ = reference([hour / flows], tmp_path / "r.csv", names, tz=tz)
        c_eng, _ = engine([hour / flows], tmp_path / "e.csv", names, tz=tz)
        assert same(c_ref, c_eng) == {}
        assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    assert c_eng.first_start is not None
    # twin: the zone moves every time by two hours
    c_utc, _ = engine([hour / "flows-nfdump-legacy.csv"], tmp_path / "u.csv", names)
    assert c_utc.first_start == pytest.approx(c_eng.first_start + 7200)


LEGACY_MALFORMED = ",".join(LEGACY_HEADER) + "\n" + "\n".join([
    "2013-04-21 17:00:00,2013-04-21 17:00:01,1.250,10.0.0.1,93.184.216.34,40000,443,TCP,"
    "...AP.SF,0,0,4,260,3,100" + ",0" * 33,
    "2013-04-21 17:00:01,2013-04-21 17:00:02,1.000,10.0.0.1,93.184.216.34,40001,443,TCP",
    "2013-04-21 17:00:02,2013-04-21 17:00:03,0:00:01.500,10.0.0.2,93.184.216.34,40002,443,"
    "TCP,...AP.SF,0,0,4,260,3,100" + ",0" * 33,
    "",
    "Summary",
    "flows,bytes,packets,avg_bps,avg_pps,avg_bpp",
    "2,780,12,3115,5,65",
]) + "\n"


def test_legacy_layout_with_summary_block_and_malformed_row(tmp_path: Path) -> None:
    path = tmp_path / "legacy.csv"
    path.write_text(LEGACY_MALFORMED)
    names = {"93.184.216.34": "site.test"}
    c_ref, e_ref = reference([path], tmp_path / "r.csv", names)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {} and c_eng.flows_read == 2
    assert e_ref.messages == e_eng.messages and e_eng.count == 1
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()


def _legacy_halves(td: str) -> str:
    """A client half of no length in its times but ``td`` seconds long, and the server half of
    its reversed 5-tuple starting 12.25 s later: they overlap (within the pairing slack of
    2 s) only through the duration."""
    rest = ",0" * 33
    return ",".join(LEGACY_HEADER) + "\n" + "\n".join([
        f"2013-04-21 17:00:00,2013-04-21 17:00:00,{td},10.0.0.1,93.184.216.34,40000,443,TCP,"
        f"...AP.S.,0,0,4,260,0,0{rest}",
        "2013-04-21 17:00:12.250,2013-04-21 17:00:13.000,0.750,93.184.216.34,10.0.0.1,443,"
        f"40000,TCP,...AP.SF,0,0,3,900,0,0{rest}",
    ]) + "\n"


@pytest.mark.parametrize(("td", "paired", "malformed"), [
    ("10.500", 1, 0), ("0:00:10.500", 1, 0), ("10.000", 0, 0), ("", 0, 0), ("0.500", 0, 0),
    ("-10.5", 0, 1), ("nan", 0, 1), ("1" * 600, 0, 1)])
def test_legacy_duration_extends_the_end_as_the_reference(tmp_path: Path, td: str,
                                                          paired: int, malformed: int) -> None:
    """nfdump's legacy ``td`` makes a flow end at ``max(te, ts + td)``: it decides here
    whether the two halves pair (10.5 s + the 2 s slack reaches 12.25 s; 10 s does not, nor
    no duration); a duration in another form (HH:MM:SS) is the reference's to read, and one
    it refuses (negative, not a number, over-long) makes the row malformed."""
    path = tmp_path / "legacy.csv"
    path.write_text(_legacy_halves(td))
    names = {"93.184.216.34": "site.test"}
    c_ref, e_ref = reference([path], tmp_path / "r.csv", names)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {} and e_ref.messages == e_eng.messages
    assert e_eng.count == malformed and c_eng.flows_read == 2 - malformed
    assert c_ref.paired == c_eng.paired == paired
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()


def test_strict_stops_at_the_first_malformed_row_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "unusual.csv"
    path.write_text(UNUSUAL)
    out = tmp_path / "wl.csv"
    with pytest.raises(MalformedRow) as first:  # the reference, strict
        list(read_flows([path], ErrorLog(strict=True)))
    with pytest.raises(MalformedRow) as info:
        columnar.build([path], out, columnar.EngineConfig(name_map=UNUSUAL_NAMES),
                       ErrorLog(strict=True))
    assert (info.value.source, info.value.line) == (str(path), first.value.line) == (
        str(path), 9)
    assert not out.exists() and list(tmp_path.iterdir()) == [path]


def test_corrupt_capture_file_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    if shutil.which("nfdump") is None:
        pytest.skip("nfdump not installed")
    bad = tmp_path / "nfcapd.201304211700"
    bad.write_bytes(b"\x0c\xa5" + b"\x00" * 300)  # nfdump's magic, then nonsense
    out = tmp_path / "wl.csv"
    with pytest.raises(ReplayIOError) as info:
        columnar.build([bad], out, columnar.EngineConfig(), ErrorLog())
    assert "\n" not in str(info.value)
    assert not out.exists()


def _pcap_dir(tmp_path: Path) -> tuple[list[Path], list[Path]]:
    """Two 5-minute nfcapd files from nfpcapd, each a capture of one-way flows."""
    t0 = 1366563600.0
    files = []
    for i in range(2):
        pcap = tmp_path / f"part{i}.pcap"
        write_pcap_exchange(pcap, [
            (t0 + 300 * i + 10 + j, f"10.0.0.{j + 1}", "93.184.216.34", 40000 + 10 * i + j,
             443, 800 + 100 * j) for j in range(3)])
        out = tmp_path / f"out{i}"
        out.mkdir()
        subprocess.run(["nfpcapd", "-r", str(pcap), "-w", str(out)], check=True,
                       capture_output=True, timeout=60)
        files += sorted(p for p in out.rglob("nfcapd.*") if p.is_file())
    trace = tmp_path / "trace"
    trace.mkdir()
    copied = []
    for i, f in enumerate(files):
        dst = trace / f"nfcapd.2013042117{i * 5:02d}"
        shutil.copy(f, dst)
        copied.append(dst)
    return files, copied


@needs_nfdump
def test_real_nfcapd_files_directory_as_one_trace(tmp_path: Path) -> None:
    _, copied = _pcap_dir(tmp_path)
    names = {"93.184.216.34": "site.test"}
    c_ref, _ = reference(copied, tmp_path / "r.csv", names)
    c_eng, _ = engine([tmp_path / "trace"], tmp_path / "e.csv", names)  # the directory
    assert c_eng.flows_read == 12 and c_eng.paired == 6
    assert same(c_ref, c_eng) == {}
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    c_glob, _ = engine([tmp_path / "trace" / "nfcapd.*"], tmp_path / "g.csv", names)
    assert same(c_eng, c_glob) == {}
    # twin: one file of the two is half the trace
    c_one, _ = engine([copied[0]], tmp_path / "o.csv", names)
    assert c_one.flows_read == 6


@needs_nfdump
def test_nfdump_csv_output_is_read_in_utc_whatever_the_zone(tmp_path: Path) -> None:
    """nfdump prints a capture's times in UTC (the engine runs it so, as the reference
    does): ``--tz`` is for the naive times of CSV traces, not for capture files."""
    _, copied = _pcap_dir(tmp_path)
    names = {"93.184.216.34": "site.test"}
    zone = utc_offset_zone(5)
    errors = ErrorLog()
    c_ref = StageCounters()
    write_workload(build_workload(read_flows(copied, errors, nfdump_output="csv", tz=zone),
                                  Namer(names), WorkloadConfig(), c_ref, {}), tmp_path / "r.csv")
    c_eng, _ = columnar.build(copied, tmp_path / "e.csv", columnar.EngineConfig(
        name_map=names, nfdump_output="csv", tz=zone), ErrorLog())
    assert same(c_ref, c_eng) == {} and c_eng.first_start == 1366563610.0
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()


def test_parquet_output_replays_like_csv(hour: Path, tmp_path: Path) -> None:
    names = read_name_map(hour / "names.txt")
    csv_out, pq_out = tmp_path / "wl.csv", tmp_path / "wl.parquet"
    engine([hour / "flows.csv"], csv_out, names)
    engine([hour / "flows.csv"], pq_out, names)
    assert pq_out.read_bytes()[:4] == b"PAR1"
    a, b = list(read_workload(csv_out)), list(read_workload(pq_out))
    assert len(a) == len(b) > 1000
    assert all(x.kind == y.kind and x.client == y.client and x.host == y.host
               and x.port == y.port and abs(x.offset - y.offset) < 1e-6 for x, y in zip(
                   a, b, strict=True))
    assert pl.read_parquet(pq_out).columns[:2] == ["offset", "kind"]


def test_cli_workload_progress_quiet_and_stages(hour: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "wl.csv"
    assert main(["workload", str(hour / "flows.csv"), "--names", str(hour / "names.txt"),
                 "-o", str(out), "--jobs", "2"]) == 0
    err = capsys.readouterr().err
    assert "flows read" in err
    stages = json.loads((tmp_path / "wl.csv.stages.json").read_text())
    assert stages["engine"].startswith("columnar") and stages["jobs"] == 2
    assert main(["workload", str(hour / "flows.csv"), "--names", str(hour / "names.txt"),
                 "-o", str(tmp_path / "q.csv"), "-q"]) == 0
    assert "workload:" not in capsys.readouterr().err  # quiet: no progress lines


def test_workload_freezes_the_collector_only_in_its_own_process(hour: Path,
                                                              tmp_path: Path) -> None:
    """``replay workload`` takes its imports out of the cyclic collector's sight when it is
    the process's command (console script, ``python -m``), never in a caller's process."""
    import gc
    import sys

    before = gc.get_freeze_count()
    args = ["workload", str(hour / "flows.csv"), "--names", str(hour / "names.txt"), "-q"]
    assert main([*args, "-o", str(tmp_path / "a.csv")]) == 0
    assert gc.get_freeze_count() == before  # a caller's objects stay collectable
    script = ("import gc, sys; from replay.cli import main; sys.argv = ['replay', *sys.argv[1:]]; "
              "code = main(); print(gc.get_freeze_count()); sys.exit(code)")
    r = subprocess.run([sys.executable, "-c", script, *args, "-o", str(tmp_path / "b.csv")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) > 10_000  # polars' objects among them
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: [])(0)) < 2,
                    reason="needs a process allowed on two CPUs or more")
def test_workload_holds_its_threads_to_jobs_cpus_only_in_its_own_process(
        hour: Path, tmp_path: Path) -> None:
    """``replay workload --jobs 1`` as the process's command holds every thread it has (the
    engine's among them) to one CPU, the one it started on; ``--any-cpu`` does not, nor a
    call in a caller's process, nor ``--jobs`` as many as the CPUs allowed."""
    import sys

    allowed = sorted(os.sched_getaffinity(0))
    args = ["workload", str(hour / "flows.csv"), "--names", str(hour / "names.txt"), "-q"]
    script = ("import os, sys, threading; from replay.cli import main; "
              "sys.argv = ['replay', *sys.argv[1:]]; code = main(); "
              "print(sorted({tuple(sorted(os.sched_getaffinity(int(t)))) "
              "for t in os.listdir('/proc/self/task')})); sys.exit(code)")

    def command(*extra: str) -> tuple[list[int], str]:
        out = tmp_path / f"w{len(extra)}{extra[-1] if extra else ''}.csv"
        r = subprocess.run([sys.executable, "-c", script, *args, *extra, "-o", str(out)],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        stages = json.loads(out.with_name(out.name + ".stages.json").read_text())
        return stages["cpus"], r.stdout.split("\n")[-2]

    held, threads = command("--jobs", "1")
    assert len(held) == 1 and held[0] in allowed
    assert threads == str([tuple(held)])  # every thread, polars' too
    # twins: --any-cpu, --jobs as many as allowed, and a caller's process keep them all
    assert command("--jobs", "1", "--any-cpu")[0] == allowed
    assert command("--jobs", str(len(allowed)))[0] == allowed
    assert main([*args, "--jobs", "1", "-o", str(tmp_path / "c.csv")]) == 0
    assert sorted(os.sched_getaffinity(0)) == allowed
    assert json.loads((tmp_path / "c.csv.stages.json").read_text())["cpus"] == allowed


def test_a_file_that_is_not_utf8_is_read_as_the_reference_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    rows = [",".join(CANONICAL_COLUMNS)]
    rows += [f"{1366563600 + i},{1366563601 + i},10.0.0.{i},198.18.0.1,4000{i},443,6,4,260,"
             for i in range(5)]
    data = ("\n".join(rows) + "\n").encode()
    data = data.replace(b"10.0.0.3", b"10.0.0.\xe93")  # one invalid UTF-8 byte
    path.write_bytes(data)
    c_ref, e_ref = reference([path], tmp_path / "r.csv", UNUSUAL_NAMES)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", UNUSUAL_NAMES)
    assert same(c_ref, c_eng) == {} and e_eng.count == e_ref.count == 1
    assert e_ref.messages == e_eng.messages  # counted once, not once per attempt
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()


def test_line_and_field_bounds_as_the_reference(tmp_path: Path) -> None:
    from replay.ingest import MAX_LINE_CHARS

    def row(total: int) -> str:  # a valid row whose bytes are padded with leading zeros
        base = "1366563600,1366563601,10.0.0.1,198.18.0.1,1,443,6,1,1"
        return base[:-1] + "0" * (total - len(base)) + "1"

    path = tmp_path / "long.csv"
    path.write_text("\n".join([",".join(CANONICAL_COLUMNS[:9]), row(600), row(500),
                               row(MAX_LINE_CHARS + 1)]) + "\n")
    c_ref, e_ref = reference([path], tmp_path / "r.csv", UNUSUAL_NAMES)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", UNUSUAL_NAMES)
    assert same(c_ref, c_eng) == {} and c_eng.flows_read == 1  # the 500-character row
    assert e_ref.messages == e_eng.messages and e_eng.count == 2


def _legacy_row(i: int, **fields: str) -> str:
    """A valid nfdump legacy row (client 10.0.0.``i``), with ``fields`` by column name."""
    row = dict.fromkeys(LEGACY_HEADER, "0")
    row.update(ts=f"2013-04-21 17:00:{i:02d}", te=f"2013-04-21 17:00:{i + 1:02d}", td="1.000",
               sa=f"10.0.0.{i}", da="93.184.216.34", sp=str(40000 + i), dp="443", pr="TCP",
               flg="...AP.SF", ipkt="4", ibyt="260")
    row.update(fields)
    return ",".join(row[c] for c in LEGACY_HEADER)


def _same_as_reference(path: Path, tmp_path: Path, names: dict[str, str],
                       ) -> tuple[StageCounters, ErrorLog]:
    c_ref, e_ref = reference([path], tmp_path / "r.csv", names)
    c_eng, e_eng = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {}
    assert e_ref.messages == e_eng.messages  # the same words, files and lines
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    return c_eng, e_eng


LEGACY_NAMES = {"93.184.216.34": "site.test"}


def test_fields_the_fast_path_never_reads_are_bounded_as_the_reference(
        tmp_path: Path) -> None:
    """The reference refuses a row with any field over 512 characters and a line over 16,384,
    whichever column: the engine reads only the columns it needs, yet refuses the same rows
    (an over-long flag or MPLS label, a field beyond the header's, a line of many
    500-character fields) and keeps a row of 512 exactly."""
    path = tmp_path / "legacy.csv"
    many = ",".join(["x" * 500] * 40)
    path.write_text("\n".join([
        ",".join(LEGACY_HEADER), _legacy_row(1), _legacy_row(2, flg="F" * 600),
        _legacy_row(3, mpls1="7" * 700), _legacy_row(4) + "," + "y" * 513,
        _legacy_row(5) + "," + many, _legacy_row(6, flg="F" * 512),
        _legacy_row(7, tr="1" * 513), _legacy_row(8)]) + "\n")
    c_eng, e_eng = _same_as_reference(path, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 5
    assert sum("line too long" in m for m in e_eng.messages) == 1


def test_long_lines_with_every_field_in_bounds_stay_on_the_fast_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line over 512 bytes whose fields are all within the reference's bounds (IPv6
    addresses, MAC addresses and MPLS labels in every column, 512 multi-byte characters) is
    parsed on the fast path, as the reference parses it; only the row with a field over the
    bound goes to the per-row parser."""
    v6 = "2001:db8:ffff:ffff:ffff:ffff:ffff:ff{:02x}"
    wide = {c: "0a:1b:2c:3d:4e:5f" for c in ("ismc", "odmc", "idmc", "osmc")}
    wide |= {f"mpls{i}": "1048575-7-1" for i in range(1, 11)}
    wide |= {"nh": v6.format(1), "nhb": v6.format(2), "ra": v6.format(3),
             "tr": "2013-04-21 17:00:01.123", "ibyt": "12345678901234", "obyt": "98765432109876",
             "cl": "1234567.890", "sl": "1234567.890", "al": "1234567.890"}
    rows = [_legacy_row(1, **wide, sa=v6.format(4)), _legacy_row(2, flg="é" * 512),
            _legacy_row(3, flg="é" * 513), _legacy_row(4, **wide)]
    assert all(len(r.encode()) > 512 for r in rows)
    path = tmp_path / "legacy-v6.csv"
    path.write_text("\n".join([",".join(LEGACY_HEADER), *rows]) + "\n")
    residue = _residue_spy(monkeypatch)
    c_eng, e_eng = _same_as_reference(path, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 1 and ":4:" in e_eng.messages[0]
    assert residue == [{2}]  # the third row alone


def test_quotes_and_carriage_returns_number_lines_as_the_reference(tmp_path: Path) -> None:
    """The reference reads each line by itself (a quote never joins two lines) and ends a
    line at a lone carriage return: a quoted field across two lines, a quoted comma in a
    column the engine does not read (the reference's fields shift after it), and a lone
    carriage return, each followed by malformed rows whose line numbers must be the
    reference's."""
    ok = "1366563600,1366563601,10.0.0.1,198.18.0.1,1,443,6,1,1,"
    canonical = tmp_path / "quoted.csv"
    canonical.write_text("\n".join([
        ",".join(CANONICAL_COLUMNS), ok, '1366563600,1366563601,"10.0.0.2',
        '",198.18.0.1,1,443,6,1,1,', ok.replace("10.0.0.1", "10.0.0.3"), "bad,row",
        ok.replace("10.0.0.1", "10.0.0.4"), ok.replace("1,443", '"1",443')]) + "\n")
    c_eng, e_eng = _same_as_reference(canonical, tmp_path, UNUSUAL_NAMES)
    assert c_eng.flows_read == 4 and e_eng.count == 3 and ":6:" in e_eng.messages[2]
    legacy = tmp_path / "legacy.csv"
    legacy.write_text("\n".join([
        ",".join(LEGACY_HEADER), _legacy_row(1, flg='"AP,SF"'), _legacy_row(2),
        "not,a,row", _legacy_row(3)]) + "\n")
    c_eng, e_eng = _same_as_reference(legacy, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 1 and ":4:" in e_eng.messages[0]
    lone = tmp_path / "lone-cr.csv"
    lone.write_bytes(("\n".join([
        ",".join(CANONICAL_COLUMNS), ok, ok.replace(",10.0.0.1,", ",10.0.0.5,\r1,"),
        "bad,row", ok.replace("10.0.0.1", "10.0.0.6")]) + "\r\n").encode())
    c_eng, e_eng = _same_as_reference(lone, tmp_path, UNUSUAL_NAMES)
    assert c_eng.flows_read == 2 and e_eng.count == 3 and ":5:" in e_eng.messages[2]


def _residue_spy(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """The rows each input leaves to the per-row parser, as the engine asks for them."""
    from replay.columnar import ingest

    residue: list[set[int]] = []
    real = ingest._residue

    def spy(src: Any, wanted: set[int], *args: Any) -> Any:
        residue.append(set(wanted))
        return real(src, wanted, *args)

    monkeypatch.setattr(ingest, "_residue", spy)
    return residue


def _quote_every_field(text: str) -> str:
    return "".join(",".join(f'"{f}"' for f in line.split(",")) + "\n"
                   for line in text.splitlines())


@pytest.mark.parametrize("flows", ["flows.csv", "flows-nfdump-legacy.csv"])
def test_every_field_quoted_stays_on_the_fast_path(hour: Path, tmp_path: Path, flows: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Some exporters quote every field: where every quote encloses a whole field with no
    quote or comma inside, polars reads with quoting, as the reference reads it, and no row
    goes to the per-row parser (an empty quoted field and quoted integers included)."""
    path = tmp_path / f"quoted-{flows}"
    text = (hour / flows).read_text()
    path.write_text(_quote_every_field(text))
    if flows == "flows.csv":
        assert path.read_text().count('""') > 1000  # empty fields (no SNI), quoted
    residue = _residue_spy(monkeypatch)
    names = read_name_map(hour / "names.txt")
    c_eng, e_eng = _same_as_reference(path, tmp_path, names)
    assert c_eng.flows_read == len(text.splitlines()) - 1 > 10_000 and e_eng.count == 0
    assert residue == [set()]


def test_quoted_fields_in_other_forms_are_the_per_row_parsers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quoted lines beside one whose quotes polars' quoting would read otherwise (a doubled
    quote, a quote inside a field): every line with a quote goes to the per-row parser, no
    quoting in the reader. A quoted comma is read by both alike (it stays on the fast path),
    but on a long line it could hide an over-long field from the line pass: that line is the
    reference's. And a quoted field over the bound is refused as the reference refuses it."""
    rows = [_quote_every_field(_legacy_row(i)).strip() for i in range(1, 5)]
    residue = _residue_spy(monkeypatch)
    path = tmp_path / "legacy.csv"
    for odd in ('"A""P"', 'A"P"', '"A,P"'):
        path.write_text("\n".join([",".join(LEGACY_HEADER), rows[0],
                                   _legacy_row(5, flg=odd), rows[1], "bad,row", rows[2]])
                        + "\n")
        c_eng, e_eng = _same_as_reference(path, tmp_path, LEGACY_NAMES)
        assert e_eng.count == 1 and ":5:" in e_eng.messages[0], (odd, e_eng.messages)
        assert c_eng.flows_read == 4
        # every quoted line, or (a quoted comma: read alike) the malformed row alone
        assert residue[-1] == ({3} if odd == '"A,P"' else {0, 1, 2, 3, 4}), (odd, residue)
    long = tmp_path / "long.csv"
    long.write_text("\n".join([",".join(LEGACY_HEADER), rows[0],
                               _quote_every_field(_legacy_row(5, flg="F" * 511)).strip(),
                               _quote_every_field(_legacy_row(6, flg="F" * 513)).strip(),
                               rows[1]]) + "\n")
    c_eng, e_eng = _same_as_reference(long, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 1 and ":4:" in e_eng.messages[0]
    assert residue[-1] == {1, 2}  # over 512 with its quotes: the reference decides
    comma = tmp_path / "comma.csv"  # 601 characters in one quoted field, 300 either side
    comma.write_text("\n".join([",".join(LEGACY_HEADER), rows[0],
                                _legacy_row(5, flg=f'"{"F" * 300},{"F" * 300}"'),
                                _legacy_row(6, flg='"F,' + "F" * 200 + '"', nh="N" * 400),
                                rows[1]]) + "\n")
    c_eng, e_eng = _same_as_reference(comma, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 1 and ":3:" in e_eng.messages[0]
    assert residue[-1] == {1, 2}  # long lines with a quoted comma: the reference's


def test_a_header_after_blank_and_comment_lines_as_the_reference(tmp_path: Path) -> None:
    """The reference's header is its first line that is not blank nor a comment, it ignores
    fields beyond the header's, and it reads a first row with fewer fields as any other (the
    engine's reader stopped there with a SchemaError)."""
    ok = "1366563600,1366563601,10.0.0.1,198.18.0.1,1,443,6,1,1,"
    path = tmp_path / "late-header.csv"
    path.write_text("\n".join(["", "# exported by hand", ",".join(CANONICAL_COLUMNS), ok,
                               "bad,row", ok.replace("10.0.0.1", "10.0.0.2")]) + "\n")
    c_eng, e_eng = _same_as_reference(path, tmp_path, UNUSUAL_NAMES)
    assert c_eng.flows_read == 2 and e_eng.count == 1 and ":5:" in e_eng.messages[0]
    comments = tmp_path / "comments.csv"
    comments.write_text("# nothing but\n\n# comments\n")
    c_eng, e_eng = _same_as_reference(comments, tmp_path, UNUSUAL_NAMES)
    assert c_eng.flows_read == 0 and e_eng.count == 0
    extra = tmp_path / "extra.csv"  # more fields than the header's, on the first row too
    extra.write_text("\n".join([",".join(CANONICAL_COLUMNS), ok + ",more", ok + ",x,y",
                                "bad,row"]) + "\n")
    c_eng, e_eng = _same_as_reference(extra, tmp_path, UNUSUAL_NAMES)
    assert c_eng.flows_read == 2 and e_eng.count == 1
    # fewer fields than the header's on the first row: 13 (the reference's least for the
    # legacy layout), and 28 when one quoted field holds the commas of 21
    short = tmp_path / "short.csv"
    full = _legacy_row(2)
    spans = full.split(",")
    spans[9], spans[29] = '"' + spans[9], spans[29] + '"'
    for first in (",".join(full.split(",")[:13]), ",".join(spans)):
        short.write_text("\n".join([",".join(LEGACY_HEADER), first, full, "bad,row"]) + "\n")
        c_eng, e_eng = _same_as_reference(short, tmp_path, LEGACY_NAMES)
        assert c_eng.flows_read == 2 and e_eng.count == 1, (first, e_eng.messages)


@pytest.mark.parametrize("value", [" 443", "\t443", "+443", "0443", "443 ", "4_43", "٤٤٣",
                                   "4.43", "", "-1", str(2**60), str(2**60 + 1), "9" * 20,
                                   "0" * 500 + "443"])
def test_ports_and_counters_read_as_integers_as_the_reference(tmp_path: Path,
                                                               value: str) -> None:
    """polars' reader reads ports and counters as integers: only in forms Python's int()
    reads the same way; any other form is the reference's to read or refuse (a counter
    over 2**60 too: a flow's sum of three fits 64 bits)."""
    path = tmp_path / "legacy.csv"
    path.write_text("\n".join([",".join(LEGACY_HEADER), _legacy_row(1, dp=value),
                               _legacy_row(2, ibyt=value), _legacy_row(3, opkt=value),
                               _legacy_row(4)]) + "\n")
    _same_as_reference(path, tmp_path, LEGACY_NAMES)


def test_byte_totals_past_64_bits_as_the_reference(tmp_path: Path) -> None:
    """Counters at their bound (2**60 bytes each way): four flows' bytes are past 2**63,
    where a 64-bit sum wraps; the stage totals are Python's, as the reference's."""
    path = tmp_path / "legacy.csv"
    big = str(2**60)
    path.write_text("\n".join([",".join(LEGACY_HEADER)] + [
        _legacy_row(i, ibyt=big, obyt=big) for i in range(1, 7)]) + "\n")
    c_eng, _ = _same_as_reference(path, tmp_path, LEGACY_NAMES)
    assert c_eng.ssl_bytes_kept == c_eng.ssl_bytes_named == 6 * 2 * 2**60 > 2**63


def test_exact_sum_is_pythons_sum() -> None:
    from replay.columnar.events import exact_sum
    for values in ([], [1, 2, 3], [2**62, 2**62, 2**62], [-(2**62)] * 3, [2**63 - 1] * 5):
        assert exact_sum(pl.Series(values, dtype=pl.Int64)) == sum(values), values


def test_progress_counts_inputs_read_again_once(tmp_path: Path) -> None:
    """Inputs read again (the second is not UTF-8, then has a port polars does not read as
    an integer: every input is read from the start each time) are counted once in the
    progress: the count starts again with the reading."""
    rows = [",".join(LEGACY_HEADER), _legacy_row(1), _legacy_row(2, dp=" 443"),
            _legacy_row(3, sa="10.0.0.\xe9"), _legacy_row(4)]
    clean, latin1 = tmp_path / "clean.csv", tmp_path / "latin1.csv"
    clean.write_text("\n".join([rows[0], rows[1], rows[4]]) + "\n")
    latin1.write_bytes(("\n".join(rows) + "\n").encode("latin-1"))
    told: list[int] = []
    progress = columnar.Progress(6, None, on_rows=told.append)
    errors = ErrorLog()
    counters, _ = columnar.build([clean, latin1], tmp_path / "e.csv", columnar.EngineConfig(
        jobs=1, name_map=LEGACY_NAMES), errors, progress=progress)
    assert counters.flows_read == 5 and errors.count == 1  # the address is malformed
    assert progress.rows == 6 and told[-1] == 6, told
    assert told.count(2) >= 2, told  # the clean input was read again


def test_irregular_rows_of_a_file_that_is_not_utf8_as_the_reference(tmp_path: Path) -> None:
    """The lenient reading (invalid UTF-8) finds the same irregular rows: an over-long field
    the engine never reads, a quoted comma, and a lone carriage return."""
    rows = [",".join(LEGACY_HEADER), _legacy_row(1, flg="F\xe9" * 300), _legacy_row(2),
            _legacy_row(3, flg='"A,\xe9"'), "bad", _legacy_row(4)]
    path = tmp_path / "latin1.csv"
    path.write_bytes(("\n".join(rows) + "\n").encode("latin-1"))
    c_eng, e_eng = _same_as_reference(path, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 2
    path.write_bytes(("\n".join(rows[:3] + ["x\rbad"] + rows[3:]) + "\n").encode("latin-1"))
    c_eng, e_eng = _same_as_reference(path, tmp_path, LEGACY_NAMES)
    assert c_eng.flows_read == 3 and e_eng.count == 4


def _flow_times_engine(path: Path, tmp_path: Path) -> list[tuple[float, float]]:
    from datetime import UTC

    cfg = columnar.EngineConfig()
    srcs = columnar.plan_sources([path], "auto", "fmt", tmp_path, UTC, None)
    parts = columnar.Partitions(tmp_path / "parts", 1, cfg.flow_filter)
    columnar.ingest_source(srcs[0], parts, columnar.Canonical(), UTC, ErrorLog(),
                           lambda _: None)
    df = parts.frame(0).sort("seq")
    return list(zip(df["start"].to_list(), df["end"].to_list(), strict=True))


@pytest.mark.parametrize("form", ["datetime-s", "datetime-ms", "datetime-us", "epoch-ms",
                                  "epoch-s"])
def test_every_parsed_time_is_the_reference_float(tmp_path: Path, form: str) -> None:
    """Times to the last bit, not just as the workload prints them: polars divides by a
    scalar through its reciprocal, off by one unit in the last place for about a quarter of
    timestamps; the engine must divide as Python does."""
    import random
    from datetime import UTC, datetime

    rng = random.Random(7)
    rows = [",".join(CANONICAL_COLUMNS)]
    for i in range(3000):
        us = rng.randrange(1_300_000_000_000_000, 1_400_000_000_000_000)
        if form.startswith("datetime"):
            d = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")
            t = f"{d}.{us % 1_000_000 // 1000:03d}" if form == "datetime-ms" else \
                f"{d}.{us % 1_000_000:06d}" if form == "datetime-us" else d
        elif form == "epoch-ms":
            t = str(us // 1000)
        else:
            t = f"{us // 1_000_000}.{us % 1_000_000:06d}"
        rows.append(f"{t},{t},10.0.{i // 250}.{i % 250},192.0.2.1,40000,443,6,10,1000,")
    path = tmp_path / "times.csv"
    path.write_text("\n".join(rows) + "\n")
    ref = [(r.start, r.end) for r in read_flows([path], ErrorLog())]
    eng = _flow_times_engine(path, tmp_path)
    assert len(ref) == len(eng) == 3000
    assert [i for i, (a, b) in enumerate(zip(ref, eng, strict=True)) if a != b] == []
    if form == "datetime-s":
        # whole seconds take their own way (no division): the fast path read every row
        from replay.columnar.parse import Forms, _time

        texts = [r.split(",")[0] for r in rows[1:]]
        fast = pl.DataFrame({"t": texts}).select(
            _time("t", 0.0, Forms(epoch_times=False, time_lengths=frozenset({19}))))["t"]
        assert fast.null_count() == 0 and fast.to_list() == [s for s, _ in ref]
        return
    # twin: the scalar division polars does by itself is off for many of these values
    off = pl.DataFrame({"us": [round(s * 1_000_000) for s, _ in ref]}).select(
        pl.col("us").cast(pl.Float64) / 1_000_000.0).to_series().to_list()
    assert sum(a != b[0] for a, b in zip(off, ref, strict=True)) > 100


def _time_text(us: int, form: str) -> str:
    from datetime import UTC, datetime

    d = datetime.fromtimestamp(us // 1_000_000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return {"datetime-s": d, "datetime-ms": f"{d}.{us % 1_000_000 // 1000:03d}",
            "datetime-us": f"{d}.{us % 1_000_000:06d}", "epoch-ms": str(us // 1000),
            "epoch-s": str(us // 1_000_000),
            "epoch-frac": f"{us // 1_000_000}.{us % 1_000_000:06d}"}[form]


@pytest.mark.parametrize(("first", "later"), [
    ("datetime-s", ["datetime-ms", "datetime-us"]),
    ("datetime-ms", ["datetime-s", "datetime-us"]),
    ("epoch-frac", ["epoch-ms", "epoch-s"]),
])
def test_time_forms_the_sample_did_not_see_as_the_reference(tmp_path: Path, first: str,
                                                             later: list[str]) -> None:
    """The fast path parses only the time forms of a file's first rows; rows further on in
    another form (the sample never saw it) are still read as the reference reads them."""
    import random
    from datetime import UTC

    from replay.columnar.parse import SAMPLE_LINES, _forms, _key_columns, _time

    rng = random.Random(11)
    rows = [",".join(CANONICAL_COLUMNS)]
    forms = [first] * (SAMPLE_LINES + 200) + [f for f in later for _ in range(300)]
    texts: dict[str, list[str]] = {f: [] for f in later}
    for i, form in enumerate(forms):
        us = 1_366_563_600_000_000 + i * 1_000_123 + rng.randrange(1000)
        t = _time_text(us, form)
        if form in texts:
            texts[form].append(t)
        rows.append(f"{t},{t},10.0.{i // 250}.{i % 250},198.18.0.{i % 3},40000,443,6,10,1000,")
    path = tmp_path / "mixed.csv"
    path.write_text("\n".join(rows) + "\n")
    names = {f"198.18.0.{k}": f"site{k}.test" for k in range(3)}
    c_ref, _ = reference([path], tmp_path / "r.csv", names)
    c_eng, _ = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {} and c_eng.flows_read == len(forms)
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    # twin: the later forms are outside the fast path the sample chose (so the rows above
    # took the reference's way), while the sampled form is inside it
    src = columnar.plan_sources([path], "auto", "fmt", tmp_path, UTC)[0]
    chosen = _forms(src, *_key_columns(src))
    for form, values in texts.items():
        fast = pl.DataFrame({"t": values}).select(_time("t", 0.0, chosen))["t"]
        assert fast.null_count() == len(values), form
    first_values = [_time_text(1_366_563_600_000_000 + k * 7919, first) for k in range(50)]
    fast = pl.DataFrame({"t": first_values}).select(_time("t", 0.0, chosen))["t"]
    assert fast.null_count() == 0


def test_client_cache_packed_key_gives_the_three_columns_hits() -> None:
    """Where every host is a map name, the client cache keys each flow by one integer
    packing (client, name, port); its hits are those of the three columns as they are."""
    import random

    from replay.columnar.events import _client_cache, _packed_key

    rng = random.Random(5)
    names = pl.DataFrame({"name": ["a.test", "b.test", "a.test", "c.test"]}).with_columns(
        pl.col("name").rank("dense").alias("name_id"))  # two addresses, one name
    addresses = [rng.randrange(4) for _ in range(5000)]
    rows = [names.row(a) for a in addresses]
    clients = [f"client{rng.randrange(40)}" for _ in rows]
    df = pl.DataFrame({"client": clients, "name": [r[0] for r in rows],
                       "name_id": [r[1] for r in rows],
                       "port": [rng.choice([443, 8443, 65535]) for _ in rows]})
    df = df.with_columns(pl.col("client").rank("dense").alias("client_id"),
                         pl.col("name").alias("host"), pl.lit(None, pl.String).alias("sni"),
                         pl.lit(None, pl.String).alias("name_rdns"))
    three = df.select(~pl.struct("client", "host", "port").is_first_distinct())
    assert _packed_key(df) is not None
    hits = _client_cache(df, None)
    assert hits.to_list() == three.to_series().to_list() and 0 < hits.sum() < df.height
    # twin: keyed by address instead of name, two addresses of one name would miss
    by_address = df.with_columns(pl.Series("name_id", addresses)).select(
        ~pl.struct("client", "name_id", "port").is_first_distinct()).to_series()
    assert by_address.sum() < hits.sum()
    # twin: a host from SNI (not a map name) is keyed by the three columns, not packed
    with_sni = df.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("x.test"))
                               .alias("sni"))
    assert _packed_key(with_sni) is None
    assert _client_cache(with_sni, None).to_list() == three.to_series().to_list()


def _clients_trace(lone_server_half: bool) -> str:
    """Named flows from three sources: one in canonical form, one written as an IPv4-mapped
    IPv6 address (in upper case, canonical form ::ffff:a00:4), one only in a row the fast
    path leaves to the reference (an ISO time); with ``lone_server_half``, a server half
    whose client is its destination, 10.0.0.7, which is no flow's source."""
    rows = [",".join(CANONICAL_COLUMNS)]
    rows += [f"{1366563600 + k}.5,{1366563601 + k}.5,10.0.0.1,198.18.0.{1 + k % 3},"
             f"{40000 + k},443,6,4,260," for k in range(20)]
    rows += [f"{1366563700 + k}.5,{1366563701 + k}.5,::FFFF:10.0.0.4,198.18.0.{1 + k % 2},"
             f"{41000 + k},443,6,4,260," for k in range(10)]
    rows.append("2013-04-21T17:03:00+00:00,2013-04-21T17:03:01+00:00,10.0.0.9,198.18.0.1,"
                "42000,443,6,4,260,")
    if lone_server_half:
        rows.append("1366563800.5,1366563801.5,198.18.0.2,10.0.0.7,443,43000,6,4,260,")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("lone_server_half", [False, True])
def test_clients_from_the_sources_read_as_the_reference(tmp_path: Path,
                                                        lone_server_half: bool) -> None:
    """With one partition the clients are all the sources read (not found among the named
    flows): the changed form, the residue's source and a turned-around server half's client
    must each get their pseudonym as the reference gives it."""
    path = tmp_path / "clients.csv"
    path.write_text(_clients_trace(lone_server_half))
    names = {"198.18.0.1": "one.test", "198.18.0.2": "two.test", "198.18.0.3": "three.test"}
    c_ref, _ = reference([path], tmp_path / "r.csv", names)
    c_eng, _ = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {} and c_eng.reverse_only == int(lone_server_half)
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    clients = {e.client for e in read_workload(tmp_path / "e.csv")}
    assert len(clients) == 3 + int(lone_server_half) and "" not in clients
    # twin: the sources read are all one partition's sources, in canonical form
    canon = columnar.Canonical()
    canon.learn_addresses(pl.Series(["10.0.0.1", "::FFFF:10.0.0.4", "bad"]), sources=True)
    assert sorted(canon.sources().to_list()) == ["10.0.0.1", "::ffff:a00:4"]


@pytest.mark.parametrize("name", ["plain.test", 'a,"b".test', "line\nbreak.test"])
def test_text_needing_quotes_is_quoted_as_the_reference(tmp_path: Path, name: str) -> None:
    """The workload's text is written unquoted when nothing in it needs quotes; a name that
    does (given to the engine directly: the map's reader refuses it) is quoted as Python's
    csv module quotes it."""
    path = tmp_path / "flows.csv"
    path.write_text(_clients_trace(False))
    names = {"198.18.0.1": name, "198.18.0.2": "two.test"}
    c_ref, _ = reference([path], tmp_path / "r.csv", names)
    c_eng, _ = engine([path], tmp_path / "e.csv", names)
    assert same(c_ref, c_eng) == {}
    assert (tmp_path / "r.csv").read_bytes() == (tmp_path / "e.csv").read_bytes()
    assert (b'"' in (tmp_path / "e.csv").read_bytes()) == (name != "plain.test")
    assert plain_text(["a.test", "b"]) and not plain_text(["a.test", "b,c"])
    assert not plain_text(['"']) and not plain_text(["x\r"]) and plain_text([])


def test_names_from_the_map_and_reverse_dns_as_the_reference(hour: Path,
                                                             tmp_path: Path) -> None:
    """Half the destinations named by the map, a quarter of the others by reverse DNS: the
    same workload and named-by counts as the reference's."""
    names = read_name_map(hour / "names.txt")
    keys = sorted(names)
    by_map = {k: names[k] for k in keys[::2]}
    by_rdns = {k: f"r-{names[k]}" for k in keys[1::4]}
    ref, eng = tmp_path / "ref.csv", tmp_path / "eng.csv"
    c_ref = StageCounters()
    errors = ErrorLog()
    write_workload(build_workload(read_flows([hour / "flows.csv"], errors),
                                  Namer(by_map, by_rdns), WorkloadConfig(), c_ref, {}), ref)
    c_eng, _ = engine([hour / "flows.csv"], eng, by_map,
                      rdns=lambda addresses: {a: by_rdns.get(a) for a in addresses})
    assert same(c_ref, c_eng) == {}
    assert ref.read_bytes() == eng.read_bytes()
    assert c_eng.named_by.get("map", 0) > 0 and c_eng.named_by.get("rdns", 0) > 0
    # twin: without reverse DNS those flows are not named
    c_map, _ = engine([hour / "flows.csv"], tmp_path / "map.csv", by_map)
    assert "rdns" not in c_map.named_by and c_map.named == c_eng.named - c_eng.named_by["rdns"]


@pytest.mark.parametrize("trace_start", [None, 100_000.5])
def test_offsets_near_a_half_microsecond_print_as_the_reference(tmp_path: Path,
                                                               trace_start: float | None,
                                                               ) -> None:
    """Offsets are written as decimals cast from the floats, which rounds ``x * 1e6``: where
    that product is near a half, the exact rounding the reference prints can differ, and
    those rows must still print as the reference's. With a trace start after some flows,
    offsets are negative (and some round to "-0.000000")."""
    import random

    from replay.columnar.output import OFFSET_DTYPE

    rng = random.Random(13)
    # epoch times early in 1970, so that the offsets keep digits below the microsecond:
    # seven decimals, the last a 5, put each within an ulp or so of a half; with the trace
    # start given, some just before it round to "-0.000000"
    base = 100_000
    times = sorted([f"{base + rng.randrange(3600)}.{rng.randrange(10**6):06d}5"
                    for _ in range(3920)] + [f"{base}.4999996" for _ in range(80)]
                   + [f"{base}.0"], key=float)  # the trace's first flow, at a whole second
    rows = [",".join(CANONICAL_COLUMNS)]
    for i, t in enumerate(times):
        rows.append(f"{t},{t},10.0.{i // 250}.{i % 250},198.18.0.{i % 3},40000,443,6,10,1000,")
    path = tmp_path / "halves.csv"
    path.write_text("\n".join(rows) + "\n")
    names = {f"198.18.0.{k}": f"site{k}.test" for k in range(3)}
    c_ref, _ = reference([path], tmp_path / "r.csv", names, trace_start=trace_start)
    c_eng, _ = engine([path], tmp_path / "e.csv", names, trace_start=trace_start)
    assert same(c_ref, c_eng) == {} and c_eng.notary_requests > 0
    ref = (tmp_path / "r.csv").read_text().splitlines()
    assert (tmp_path / "e.csv").read_text().splitlines() == ref
    if trace_start is not None:
        assert any(line.startswith("-0.000000,") for line in ref)
        return
    # twin: polars' cast alone prints some of these offsets one microsecond off (37 of
    # 4,000 here)
    exact = [line.split(",")[0] for line in ref[1:]]
    starts = [float(t) for t in times]
    raw = pl.Series([s - starts[0] for s in starts])
    cast = pl.DataFrame({"o": raw.cast(OFFSET_DTYPE)}).write_csv(None).splitlines()[1:]
    assert sum(a != b for a, b in zip(cast, exact, strict=True)) > 10


def test_decimal_offsets_equal_python_formatting() -> None:
    """The decimal offsets, unit by unit: values a hair either side of a half microsecond,
    values below one, large ones, and an empty column."""
    import math
    import random

    from replay.columnar.output import _csv_offsets

    rng = random.Random(17)
    xs: list[float] = [0.0, 0.25e-6, 0.5e-6, 1.5e-6, 2.5e-6, 12.0000005, 86_400.0000005]
    for _ in range(20_000):
        half = (rng.randrange(10**10) + 0.5) / 1e6
        xs += [half, math.nextafter(half, 0.0), math.nextafter(half, math.inf)]
    xs += [rng.random() * 10**rng.randrange(1, 11) for _ in range(20_000)]
    got = _csv_offsets(pl.Series(xs))
    assert got is not None
    printed = pl.DataFrame({"o": got}).write_csv(None).splitlines()[1:]
    assert printed == [f"{round(x, 6):.6f}" for x in xs]
    empty = _csv_offsets(pl.Series([], dtype=pl.Float64))
    assert empty is not None and empty.len() == 0
    # twin: a negative offset or one a decimal cannot hold is left to the float writer
    assert _csv_offsets(pl.Series([1.0, -0.0000004])) is None
    assert _csv_offsets(pl.Series([1.0, -0.0])) is None
    assert _csv_offsets(pl.Series([1.0, 1e40])) is None
