"""A signal sent the moment the notary says it serves is handled, not fatal: the handlers
are in place before the announcement. A supervisor (or ``notary reload``) may signal as soon
as it reads the line; before, SIGTERM there ended the process without its cleanup (pending
store writes, the pid file) and SIGHUP ended it outright. The signal is sent from inside the
announcement itself, so the test does not depend on timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, os, signal, sys
from notary import cli, server

data, names = sys.argv[1], sys.argv[2].split(",")
args = cli._parser().parse_args(["serve", "--data-dir", data, "--no-tls",
                                 "--listen", "127.0.0.1:0"])
settings = cli.settings_from_args(args)
identity = server.prepare(settings)

def ready(urls):
    for name in names:  # delivered at once, as a supervisor reading the line could
        os.kill(os.getpid(), getattr(signal, name))
    print("announced", flush=True)

asyncio.run(server.serve(settings, identity, on_ready=ready))
print("stopped cleanly", flush=True)
"""


def run(tmp_path: Path, signals: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data"), signals],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("signals", ["SIGTERM", "SIGINT", "SIGHUP,SIGTERM"])
def test_a_signal_at_the_announcement_is_handled(tmp_path: Path, signals: str) -> None:
    r = run(tmp_path, signals)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.splitlines() == ["announced", "stopped cleanly"], r.stdout
    if "SIGHUP" in signals:
        assert "reload" in r.stderr.lower(), r.stderr[-2000:]


def test_twin_a_signal_without_a_handler_ends_the_process(tmp_path: Path) -> None:
    # the same announcement with a signal the notary does not handle: the default action
    r = run(tmp_path, "SIGUSR1")
    assert r.returncode != 0
    assert "stopped cleanly" not in r.stdout
