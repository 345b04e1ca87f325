"""The README's "Try it" works offline against ``notary demo`` (what ``make demo`` runs).

Every command of the README's block is run as written, only the two ports moved to free
ones and ``.venv/bin`` to this interpreter's: the site's fingerprint gets 200, the zero
fingerprint 409, the info page its pin. The twin runs the same commands against the plain
notary of ``make run``, which neither resolves nor probes the loopback site (503 or 403, never
200 or 409): the demo's settings are what
make the README work without the internet.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port
from redis_testing import wait_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def try_it_block() -> str:
    text = (ROOT / "README.md").read_text()
    after = text[text.index("Try it, offline"):]
    found = re.search(r"```sh\n(.*?)```", after, re.S)
    assert found
    return found.group(1)


@pytest.fixture
def ports() -> tuple[int, int]:
    return free_port(), free_port()


def started(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen([str(BIN / "notary"), *args], stderr=err)


@pytest.fixture
def stop_all() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.terminate()
        p.wait(20)


def run_block(port: int, site_port: int, cwd: Path) -> str:
    script = (try_it_block().replace("8443", str(port)).replace("9443", str(site_port))
              .replace(".venv/bin/", f"{BIN}/"))
    done = subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_try_it_against_the_demo(tmp_path: Path, ports: tuple[int, int],
                                 stop_all: list[subprocess.Popen[bytes]]) -> None:
    port, site_port = ports
    stop_all.append(started(["demo", "--data-dir", str(tmp_path / "demo"), "--port",
                             str(port), "--site-port", str(site_port)], tmp_path / "demo.log"))
    wait_port(port, 60)
    wait_port(site_port, 60)
    out = run_block(port, site_port, tmp_path)
    statuses = re.findall(r"HTTP/1\.1 (\d{3}) ", out)  # the bodies end without a newline
    assert statuses == ["200", "409"], out
    assert '"pin_sha1"' in out and "site.test" in out


def test_twin_the_make_run_notary_does_not_probe_the_local_site(
        tmp_path: Path, ports: tuple[int, int], stop_all: list[subprocess.Popen[bytes]]) -> None:
    port, site_port = ports
    stop_all.append(started(["demo", "--data-dir", str(tmp_path / "demo"), "--port",
                             str(free_port()), "--site-port", str(site_port)],
                            tmp_path / "demo.log"))
    stop_all.append(started(["serve", "--data-dir", str(tmp_path / "notary"), "--listen",
                             f"127.0.0.1:{port}"], tmp_path / "serve.log"))
    wait_port(port, 60)
    wait_port(site_port, 60)
    out = run_block(port, site_port, tmp_path)
    # it does not probe a name it cannot resolve, nor loopback addresses: never 200 or 409
    statuses = re.findall(r"HTTP/1\.1 (\d{3}) ", out)
    assert len(statuses) == 2 and not {"200", "409"} & set(statuses), out
