"""Every start-up failure of ``notary serve`` is one line on stderr and exit 2, no traceback.

Each failure has a twin that starts: the same command with the obstacle removed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

NOTARY = str(Path(sys.executable).parent / "notary")


def serve(*args: str, wait_for: str = "notary: serving", timeout: float = 30
          ) -> tuple[int | None, str]:
    """Start ``notary serve``; (exit code or None if it was serving, stderr so far)."""
    with subprocess.Popen([NOTARY, "serve", *args], stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        for line in proc.stderr:
            lines.append(line)
            if wait_for in line or time.monotonic() > deadline:
                proc.terminate()
                proc.wait(10)
                return None, "".join(lines)
        return proc.wait(10), "".join(lines)


def one_line_exit_2(code: int | None, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("notary: "), lines
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_port_in_use(tmp_path: Path, workers: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code, err = serve("--data-dir", str(tmp_path / "d"), "--no-tls", "--listen",
                          f"127.0.0.1:{port}", "--workers", workers)
        one_line_exit_2(code, err, f"127.0.0.1:{port}", "Address already in use")
    # twin: the port released, the same command serves
    code, err = serve("--data-dir", str(tmp_path / "d"), "--no-tls", "--listen",
                      f"127.0.0.1:{port}", "--workers", workers)
    assert code is None, err


def test_ipv6_listen_address_in_brackets(tmp_path: Path) -> None:
    try:
        holder = socket.socket(socket.AF_INET6)
        holder.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with holder:
        holder.listen()
        port = holder.getsockname()[1]
        code, err = serve("--data-dir", str(tmp_path / "d"), "--no-tls", "--listen",
                          f"[::1]:{port}")
    one_line_exit_2(code, err, f"[::1]:{port}")


def test_data_dir_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, err = serve("--data-dir", str(blocker / "data"), "--no-tls", "--listen",
                      "127.0.0.1:0")
    one_line_exit_2(code, err, "cannot create the data directory")


def test_unreadable_key(tmp_path: Path) -> None:
    data = tmp_path / "d"
    code, _ = serve("--data-dir", str(data), "--no-tls", "--listen", "127.0.0.1:0")
    assert code is None  # twin: it starts (and made its key)
    key = data / "notary.key"
    key.unlink()
    key.mkdir()  # a directory where the key should be
    code, err = serve("--data-dir", str(data), "--no-tls", "--listen", "127.0.0.1:0")
    one_line_exit_2(code, err, "key")


def test_no_tls_says_there_is_nothing_to_pin(tmp_path: Path) -> None:
    code, err = serve("--data-dir", str(tmp_path / "d"), "--no-tls", "--listen",
                      "127.0.0.1:0", wait_for="pin")
    assert code is None and "no TLS certificate here to pin" in err and "SHA-1" not in err
    # twin: with TLS the pin is printed
    code, err = serve("--data-dir", str(tmp_path / "d2"), "--listen", "127.0.0.1:0",
                      wait_for="pin")
    assert code is None and "clients pin SHA-1" in err
