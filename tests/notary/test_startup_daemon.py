"""Start-up like a daemon: every configuration error is one line and exit 2 before any worker
starts, with one worker or several, and no hang; a port another notary serves is refused.

Each failure has a twin that starts: the same command with the obstacle removed.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import trustme
from loopback import free_port
from test_startup_failures import NOTARY, one_line_exit_2, serve

ROOT = Path(__file__).resolve().parents[2]


def base(tmp_path: Path, workers: str) -> list[str]:
    return ["--data-dir", str(tmp_path / "d"), "--no-tls", "--no-log", "--listen",
            "127.0.0.1:0", "--workers", workers]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_bad_hosts_file(tmp_path: Path, workers: str) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("not an address line\n")
    code, err = serve(*base(tmp_path, workers), "--hosts-file", str(hosts))
    one_line_exit_2(code, err, str(hosts))
    hosts.write_text("127.0.0.1 site.test\n")  # twin
    code, err = serve(*base(tmp_path, workers), "--hosts-file", str(hosts))
    assert code is None, err


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("flag", ["--ca-roots", "--ca-trust"])
def test_unreadable_ca_file_no_hang(tmp_path: Path, workers: str, flag: str) -> None:
    missing = tmp_path / "missing.pem"
    started = time.monotonic()
    code, err = serve(*base(tmp_path, workers), "--verifier", "ca", flag, str(missing),
                      timeout=60)
    one_line_exit_2(code, err, str(missing))
    assert time.monotonic() - started < 60


def test_readable_ca_roots_twin(tmp_path: Path) -> None:
    pem = tmp_path / "root.pem"
    trustme.CA().cert_pem.write_to_path(str(pem))
    code, err = serve(*base(tmp_path, "2"), "--verifier", "ca", "--ca-no-mozilla",
                      "--ca-roots", str(pem))
    assert code is None, err


def test_bad_witness_key(tmp_path: Path) -> None:
    code, err = serve("--data-dir", str(tmp_path / "d"), "--no-tls", "--listen",
                      "127.0.0.1:0", "--workers", "2", "--log-witness",
                      "http://127.0.0.1:1/=w+0000+AAAA")
    one_line_exit_2(code, err, "--log-witness")


def readme_toml() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"```toml\n(.*?)```", text, re.S)
    assert found, "the README has no TOML example"
    return found.group(1)


def test_readme_toml_example(tmp_path: Path) -> None:
    # the README's own example, only its data directory moved here (the tests may run as
    # root, which could create /var/lib/...): its hosts file does not exist on this machine
    toml = readme_toml().replace("/var/lib/converge-notary", str(tmp_path / "d"))
    cfg = tmp_path / "notary.toml"
    cfg.write_text(toml)
    code, err = serve("--config", str(cfg), timeout=60)
    one_line_exit_2(code, err, "/etc/converge/hosts")
    # twin: an existing hosts file, free loopback ports, no Redis: the same example serves
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 site.test\n")
    ports = [free_port() for _ in range(4)]
    toml = (toml.replace("/etc/converge/hosts", str(hosts))
            .replace("0.0.0.0:443", f"127.0.0.1:{ports[0]}")
            .replace("0.0.0.0:4242", f"127.0.0.1:{ports[1]}")
            .replace("0.0.0.0:80", f"127.0.0.1:{ports[2]}")
            .replace("127.0.0.1:9100", f"127.0.0.1:{ports[3]}"))
    cfg.write_text("\n".join(ln for ln in toml.splitlines() if not ln.startswith("redis")))
    code, err = serve("--config", str(cfg), timeout=60)
    assert code is None, err


def test_port_served_by_another_notary(tmp_path: Path) -> None:
    port = free_port()
    first = subprocess.Popen(
        [NOTARY, "serve", "--data-dir", str(tmp_path / "a"), "--no-tls", "--no-log",
         "--listen", f"127.0.0.1:{port}", "--workers", "2"],
        stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until its workers listen
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        code, err = serve("--data-dir", str(tmp_path / "b"), "--no-tls", "--no-log",
                          "--listen", f"127.0.0.1:{port}", "--workers", "2")
        one_line_exit_2(code, err, f"127.0.0.1:{port}", "Address already in use")
    finally:
        first.terminate()
        first.wait(20)
    # twin: the port released, the same second notary starts
    code, err = serve("--data-dir", str(tmp_path / "b"), "--no-tls", "--no-log",
                      "--listen", f"127.0.0.1:{port}", "--workers", "2")
    assert code is None, err
