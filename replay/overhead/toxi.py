"""Shopify's toxiproxy, the path emulator: found or built by ``scripts/install-toxiproxy``,
started on loopback and driven through its HTTP API (urllib, JSON).

toxiproxy accepts the client's TCP connection itself, at once, and its toxics delay data
only: the SYN / SYN-ACK round trip of a real path is not carried. :func:`handshake_delay`
is what the clients add at connect to account for it (one RTT, with the profile's jitter).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from replay.errors import ReplayInputError, ReplayIOError
from replay.overhead.profiles import PathProfile
from replay.services import free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "scripts" / "install-toxiproxy"
ENV = "REPLAY_TOXIPROXY"  # an explicit toxiproxy-server executable


def explicit_executable(env: str, what: str) -> str | None:
    """The executable an environment variable names (None: unset); ``what`` names it in the
    error when the path is not an executable file."""
    explicit = os.environ.get(env)
    if explicit is not None and not (Path(explicit).is_file()
                                     and os.access(explicit, os.X_OK)):
        raise ReplayInputError(f"{what} {explicit!r} (${env}) is not an executable file")
    return explicit


def find_toxiproxy() -> str:
    """The toxiproxy-server executable: ``$REPLAY_TOXIPROXY``, else the project's build (made
    by ``scripts/install-toxiproxy`` if missing), else ``toxiproxy-server`` on PATH."""
    explicit = explicit_executable(ENV, "the path emulator")
    if explicit is not None:
        return explicit
    if INSTALL.exists():
        try:
            r = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReplayInputError(f"the path emulator is missing: {INSTALL} failed: "
                                   f"{exc}") from exc
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[-1]
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ReplayInputError(f"the path emulator is missing: {INSTALL} failed: {last}")
    found = shutil.which("toxiproxy-server")
    if found is None:
        raise ReplayInputError("the path emulator toxiproxy-server is missing (install it "
                               "with scripts/install-toxiproxy or set $REPLAY_TOXIPROXY)")
    return found


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def handshake_delay(profile: PathProfile, rng: random.Random) -> float:
    """Seconds a client waits after connect(): the TCP handshake's round trip, which
    toxiproxy does not emulate (one RTT, plus uniform jitter of both directions)."""
    j = rng.uniform(-profile.jitter_ms, profile.jitter_ms) if profile.jitter_ms else 0.0
    return max(0.0, profile.rtt_ms + j) / 1000.0


class Toxiproxy:
    """One toxiproxy server on 127.0.0.1:``api_port`` (a context manager; stopped on exit)."""

    def __init__(self, exe: str, api_port: int, log: Path) -> None:
        if not port_free(api_port):
            raise ReplayInputError(f"port {api_port} on 127.0.0.1 is in use (the emulator's "
                                   "API port)")
        self.api = f"http://127.0.0.1:{api_port}"
        self._log = log.open("wb")
        self.proc = subprocess.Popen([exe, "-host", "127.0.0.1", "-port", str(api_port)],
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                self.call("GET", "/version")
                break
            except ReplayIOError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise ReplayIOError(f"toxiproxy did not start (see {log})") from None
                time.sleep(0.05)

    def __enter__(self) -> Toxiproxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.api + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ReplayIOError(f"toxiproxy {method} {path}: {exc.code} {detail}") from exc
        except (OSError, urllib.error.URLError) as exc:
            raise ReplayIOError(f"toxiproxy {method} {path}: {exc}") from exc
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:  # GET /version answers plain text
            return text

    def proxy(self, name: str, upstream_port: int, listen_port: int = 0) -> int:
        """A proxy 127.0.0.1:listen -> 127.0.0.1:upstream; returns the listening port."""
        port = listen_port or free_port()
        if not port_free(port):
            raise ReplayInputError(f"port {port} on 127.0.0.1 is in use")
        self.call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}",
                                       "upstream": f"127.0.0.1:{upstream_port}",
                                       "enabled": True})
        return port

    def shape(self, name: str, profile: PathProfile) -> None:
        """Replace the proxy's toxics with the profile's latency, jitter and bandwidth."""
        for t in self.call("GET", f"/proxies/{name}/toxics") or []:
            self.call("DELETE", f"/proxies/{name}/toxics/{t['name']}")
        for stream, ms, jitter, kbit in (
                ("upstream", profile.up_ms, profile.up_jitter, profile.up_kbit),
                ("downstream", profile.down_ms, profile.down_jitter, profile.down_kbit)):
            if ms or jitter:
                self.call("POST", f"/proxies/{name}/toxics", {
                    "name": f"latency_{stream}", "type": "latency", "stream": stream,
                    "toxicity": 1.0, "attributes": {"latency": ms, "jitter": jitter}})
            if kbit:
                self.call("POST", f"/proxies/{name}/toxics", {
                    "name": f"bandwidth_{stream}", "type": "bandwidth", "stream": stream,
                    "toxicity": 1.0, "attributes": {"rate": max(1, kbit // 8)}})

    def clear(self, name: str) -> None:
        with contextlib.suppress(ReplayIOError):
            for t in self.call("GET", f"/proxies/{name}/toxics") or []:
                self.call("DELETE", f"/proxies/{name}/toxics/{t['name']}")
