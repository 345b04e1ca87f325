"""The locust scenarios, run headless for a few seconds against a real notary on loopback.

* the study's mix in distributed mode (master plus two worker processes): every response
  validates, both notary-cache hits and live probes appear, CSV and HTML reports are written;
* the same run with the certificate of another notary fails every request (must-fail twin);
* the trace scenario, sharded over two workers, sends every request row exactly once.
"""

from __future__ import annotations

import csv
import datetime as dt
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from scale_helpers import ROOT, VENV_BIN, NotaryProcess, TLSTarget, free_port

from notary import keys

LOADTESTS = ROOT / "loadtests"


@pytest.fixture(scope="module")
def farm(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NotaryProcess, Path, TLSTarget]]:
    tmp = tmp_path_factory.mktemp("locust")
    target = TLSTarget(tmp)
    names = [f"h{i}.test" for i in range(20)]
    (tmp / "hosts").write_text("127.0.0.1 " + " ".join(names) + "\n")
    with (tmp / "targets.csv").open("w") as fh:
        fh.write("host,port,fingerprint,role\n")
        for n in names:
            fh.write(f"{n},{target.port},{target.sha1},good\n")
        fh.write(f"gone.test,{target.port},{target.sha1},dead\n")  # filtered out by role
    notary = NotaryProcess(tmp / "notary", free_port(),
                           ["--hosts-file", str(tmp / "hosts"), "--rate-limit", "0"])
    notary.start()
    try:
        yield notary, tmp, target
    finally:
        notary.stop()
        target.stop()


def locust(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd = [str(VENV_BIN / "locust"), "--headless", "--only-summary", "--stop-timeout", "2",
           *args]
    if "--processes" in args:
        # the master's port on a free port, not locust's fixed 5557: two runs on one machine
        # (two test workers, or a user's own locust) must not take each other's
        port = str(free_port())
        cmd += ["--master-bind-port", port, "--master-port", port]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def stats(prefix: Path) -> dict[str, dict[str, str]]:
    with Path(f"{prefix}_stats.csv").open() as fh:
        return {row["Name"]: row for row in csv.DictReader(fh)}


def test_study_mix_distributed_validates_every_answer(
    farm: tuple[NotaryProcess, Path, TLSTarget], tmp_path: Path
) -> None:
    notary, tmp, _ = farm
    prefix = tmp_path / "mix"
    r = locust(["--config", str(LOADTESTS / "locust.conf"),  # the shipped defaults parse
                "-f", str(LOADTESTS / "study_mix.py"), "--processes", "2", "-u", "6", "-r", "6",
                "-t", "5s", "--host", notary.url, "--notary-cert",
                str(notary.data_dir / "notary.pem"), "--targets", str(tmp / "targets.csv"),
                "--csv", str(prefix), "--html", str(tmp_path / "report.html")], cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = stats(prefix)
    total = rows["Aggregated"]
    assert int(total["Request Count"]) > 50
    assert int(total["Failure Count"]) == 0
    assert int(rows["mix-cached [hit]"]["Request Count"]) > 0
    assert int(rows["mix-probe [miss]"]["Request Count"]) > 0
    assert (tmp_path / "report.html").stat().st_size > 1000


def test_wrong_pinned_certificate_fails_every_request(
    farm: tuple[NotaryProcess, Path, TLSTarget], tmp_path: Path
) -> None:
    notary, tmp, _ = farm
    other = keys.generate(tmp_path / "k.pem", tmp_path / "c.pem", "other",
                          now=dt.datetime.now(dt.UTC))
    prefix = tmp_path / "bad"
    r = locust(["-f", str(LOADTESTS / "cached.py"), "-u", "2", "-r", "2", "-t", "4s",
                "--host", notary.url, "--notary-cert", str(other.cert_path),
                "--targets", str(tmp / "targets.csv"), "--csv", str(prefix)], cwd=ROOT)
    assert r.returncode == 1  # locust exits 1 when any request failed
    total = stats(prefix)["Aggregated"]
    assert int(total["Request Count"]) > 0
    assert total["Failure Count"] == total["Request Count"]
    with Path(f"{prefix}_failures.csv").open() as fh:
        assert "pin mismatch" in fh.read()


def test_trace_is_sharded_over_workers_and_sent_once(
    farm: tuple[NotaryProcess, Path, TLSTarget], tmp_path: Path
) -> None:
    notary, tmp, target = farm
    workload = tmp_path / "workload.csv"
    with workload.open("w") as fh:
        fh.write("offset,kind,client,host,port,fingerprint,ssl_bytes\n")
        for i in range(40):
            kind = "client-hit" if i % 4 == 3 else "request"  # 30 requests reach the notary
            fh.write(f"{i * 0.05:.6f},{kind},c{i % 3},h{i % 20}.test,{target.port},"
                     f"{target.sha1},1000\n")
    prefix = tmp_path / "trace"
    r = locust(["-f", str(LOADTESTS / "trace.py"), "--processes", "2", "--trace-workers", "2",
                "--trace-users", "4", "--workload", str(workload), "--host", notary.url,
                "--notary-cert", str(notary.data_dir / "notary.pem"), "--csv", str(prefix)],
               cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    total = stats(prefix)["Aggregated"]
    assert int(total["Request Count"]) == 30
    assert int(total["Failure Count"]) == 0
