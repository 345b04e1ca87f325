"""What ``replay reproduce`` runs its steps with: progress bars with an ETA, background
services stopped whatever happens, commands run to completion, free loopback ports."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from replay.errors import ReplayIOError

# ------------------------------------------------------------------ progress


class Progress:
    """A one-line progress bar with an ETA on a terminal (``stream``), plain lines every
    ``every`` seconds otherwise."""

    def __init__(self, label: str, total: float, unit: str = "", stream: TextIO | None = None,
                 every: float = 10.0) -> None:
        self.label, self.total, self.unit = label, max(total, 1e-9), unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.monotonic()
        self.every = every
        self._last = 0.0

    def line(self, done: float) -> str:
        frac = min(1.0, max(0.0, done / self.total))
        elapsed = time.monotonic() - self.t0
        eta = elapsed / frac - elapsed if frac > 0.005 else float("nan")
        bar = "#" * int(frac * 24) + "." * (24 - int(frac * 24))
        eta_s = "?" if eta != eta else duration(eta)  # NaN: not enough done to tell
        return (f"{self.label:<22} [{bar}] {frac:5.1%} {done:,.0f}/{self.total:,.0f}"
                f"{self.unit} elapsed {duration(elapsed)} ETA {eta_s}")

    def update(self, done: float) -> None:
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + self.line(done)[:150])
            self.stream.flush()
        elif now - self._last >= self.every:
            self._last = now
            self.stream.write(self.line(done) + "\n")
            self.stream.flush()

    def finish(self, note: str = "") -> None:
        elapsed = duration(time.monotonic() - self.t0)
        end = f"{self.label:<22} done in {elapsed}" + (f": {note}" if note else "")
        self.stream.write(("\r" + " " * 150 + "\r" if self.tty else "") + end + "\n")
        self.stream.flush()


def duration(s: float) -> str:
    s = max(0.0, s)
    return f"{int(s // 60)}m{int(s % 60):02d}s" if s >= 60 else f"{s:.0f}s"


def watch(progress: Progress, done: Callable[[], float], work: Callable[[], Any]) -> Any:
    """Run ``work`` in this thread while another updates ``progress`` from ``done()``."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            progress.update(done())

    t = threading.Thread(target=tick, daemon=True)
    t.start()
    try:
        return work()
    finally:
        stop.set()
        t.join()


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ports(n: int) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        p = free_port()
        if p not in out:
            out.append(p)
    return out


def bin_path(name: str) -> str:
    exe = Path(sys.executable).with_name(name)
    if exe.exists():
        return str(exe)
    found = shutil.which(name)
    if found is None:
        raise ReplayIOError(f"the {name} command is not installed (make setup)")
    return found


@dataclass
class Services:
    """Background processes of the run, stopped whatever happens."""

    out: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.out / f"{name}.log").open("wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.procs.append((name, proc))
        return proc

    def wait_until(self, name: str, ready: Callable[[], bool], timeout: float = 60.0) -> None:
        proc = dict(self.procs)[name]
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                log = (self.out / f"{name}.log").read_text(errors="replace")[-1500:]
                raise ReplayIOError(f"{name} exited with {proc.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise ReplayIOError(f"{name} not ready after {timeout:g} s")
            time.sleep(0.1)

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.procs.clear()


def http_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            r.read()
        return True
    except OSError:
        return False


def run(argv: list[str], log: Path, timeout: float = 3600.0) -> str:
    """Run a command to completion; its output goes to ``log`` and is returned."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    log.write_text(r.stdout + r.stderr, encoding="utf-8")
    if r.returncode != 0:
        raise ReplayIOError(f"{' '.join(argv[:3])} ... failed ({r.returncode}): "
                            f"{(r.stderr or r.stdout)[-1500:]}")
    return r.stdout


def quick(label: str, work: Callable[[], Any]) -> Any:
    """A short step: one line when it is done."""
    p = Progress(label, 1)
    result = work()
    p.finish()
    return result


def tcp_ready(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


__all__ = ["Progress", "Services", "bin_path", "duration", "free_port", "http_ready", "ports",
           "quick", "run", "tcp_ready", "watch"]
