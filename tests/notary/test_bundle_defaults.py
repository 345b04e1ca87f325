"""``notary bundle`` and ``notary reload`` default to where ``make run`` keeps the notary
(var/notary, port 8443): after ``make run``'s keygen the bundle needs only --host and --name.
The twin: in a directory without var/notary the same command says which file is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NOTARY = str(Path(sys.executable).parent / "notary")


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NOTARY, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_bundle_reads_make_runs_data_dir(tmp_path: Path) -> None:
    assert run(tmp_path, "keygen", "--data-dir", "var/notary").returncode == 0
    done = run(tmp_path, "bundle", "--host", "localhost", "--name", "Local")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    pem = (tmp_path / "var/notary/notary.pem").read_text()
    assert doc["hosts"][0]["certificate"] == pem
    assert doc["hosts"][0]["ssl_port"] == 8443
    assert doc["bundle_location"] == "https://localhost:8443/local.notary"


def test_twin_without_var_notary(tmp_path: Path) -> None:
    done = run(tmp_path, "bundle", "--host", "localhost", "--name", "Local")
    assert done.returncode == 2
    assert done.stderr.startswith("notary: cannot read certificate var/notary/notary.pem")
    assert len(done.stderr.splitlines()) == 1
