"""One metrics endpoint for a notary running N worker processes.

With ``--workers N --metrics-listen HOST:PORT`` the supervising process serves ``/metrics``,
``/healthz`` and ``/readyz`` on HOST:PORT for the whole instance (one Prometheus scrape
target). Each worker serves its own registry on an ephemeral 127.0.0.1 port that it reports
to the supervisor; at each scrape the supervisor fetches every worker's exposition (bounded
in time and size), adds a ``worker="i"`` label to every sample, and merges the families so
each appears once (Prometheus text format 0.0.4: one ``# HELP``/``# TYPE`` per family, its
samples together). Sum over ``worker`` in PromQL for instance totals.

* ``/healthz``: 200 when every worker process is alive and its own ``/healthz`` answers;
  503 naming the workers that do not.
* ``/readyz``: 200 when every worker's ``/readyz`` is 200 (each checks the durable store);
  503 with the first reason otherwise. A load balancer takes the whole instance out.
* A worker that does not answer within :data:`FETCH_TIMEOUT` is left out of ``/metrics``
  and counted in ``notary_metrics_workers_unreachable``.

:func:`merge` is pure (text in, text out); :class:`AggregateServer` is the IO around it.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FETCH_TIMEOUT = 2.0
MAX_EXPOSITION = 4 * 1024 * 1024
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class _Family:
    comments: list[str] = field(default_factory=list)  # "# HELP ..." and "# TYPE ..."
    samples: list[str] = field(default_factory=list)


def _label(line: str, worker: str) -> str:
    """``line`` (one sample) with ``worker="..."`` as its first label."""
    name_end = len(line)
    for i, ch in enumerate(line):
        if ch in "{ ":
            name_end = i
            break
    name, rest = line[:name_end], line[name_end:]
    if rest.startswith("{}"):
        return f'{name}{{worker="{worker}"}}{rest[2:]}'
    if rest.startswith("{"):
        return f'{name}{{worker="{worker}",{rest[1:]}'
    return f'{name}{{worker="{worker}"}}{rest}'


def merge(expositions: dict[str, str]) -> str:
    """Merge the text expositions of several workers (``worker id -> text``)."""
    families: dict[str, _Family] = {}
    for worker, text in expositions.items():
        current: _Family | None = None
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    fam = families.setdefault(parts[2], _Family())
                    if len(fam.comments) < 2 and line not in fam.comments:
                        fam.comments.append(line)
                    current = fam
                continue
            if current is None:  # a sample before any family line: its own family
                current = families.setdefault(line.split("{", 1)[0].split(" ", 1)[0],
                                              _Family())
            current.samples.append(_label(line, worker))
    out: list[str] = []
    for fam in families.values():
        out.extend(fam.comments)
        out.extend(fam.samples)
    return "\n".join(out) + "\n"


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=FETCH_TIMEOUT)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read(MAX_EXPOSITION + 1)
        if len(body) > MAX_EXPOSITION:
            raise OSError(f"worker exposition larger than {MAX_EXPOSITION} bytes")
        return resp.status, body.decode("utf-8", "replace")
    finally:
        conn.close()


class AggregateServer:
    """The supervisor's metrics and health endpoint (a thread; see the module rules)."""

    def __init__(self, host: str, port: int, workers: int,
                 alive: Callable[[int], bool]) -> None:
        self._workers = workers
        self._alive = alive
        self._ports: dict[int, int] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(2, workers),
                                        thread_name_prefix="notary-metrics")
        aggregate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                status, ctype, body = aggregate.answer(self.path)
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return  # no access log: scrapes are not news

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="notary-metrics-aggregate")

    def start(self) -> AggregateServer:
        self._thread.start()
        return self

    def worker_port(self, index: int, port: int) -> None:
        """Worker ``index`` (re)started and serves its metrics on 127.0.0.1:``port``."""
        with self._lock:
            self._ports[index] = port

    def _fetch_all(self, path: str) -> dict[int, tuple[int, str] | Exception]:
        with self._lock:
            ports = dict(self._ports)
        futures = {i: self._pool.submit(_get, ports[i], path) for i in sorted(ports)}
        out: dict[int, tuple[int, str] | Exception] = {}
        for i, fut in futures.items():
            try:
                out[i] = fut.result(timeout=FETCH_TIMEOUT + 1)
            except (OSError, http.client.HTTPException, TimeoutError) as exc:
                out[i] = exc
        return out

    def answer(self, path: str) -> tuple[int, str, str]:
        route = path.split("?", 1)[0]
        if route == "/metrics":
            got = self._fetch_all("/metrics")
            texts = {str(i): r[1] for i, r in got.items() if isinstance(r, tuple) and r[0] == 200}
            missing = self._workers - len(texts)
            extra = ("# HELP notary_metrics_workers_unreachable Workers whose metrics could not "
                     "be read for this scrape\n# TYPE notary_metrics_workers_unreachable gauge\n"
                     f"notary_metrics_workers_unreachable {missing}\n"
                     "# HELP notary_workers Worker processes of this instance\n"
                     "# TYPE notary_workers gauge\n"
                     f"notary_workers {self._workers}\n")
            return 200, CONTENT_TYPE, merge(texts) + extra
        if route in ("/healthz", "/readyz"):
            got = self._fetch_all(route)
            bad = []
            for i in range(self._workers):
                r = got.get(i)
                if not self._alive(i):
                    bad.append(f"worker {i}: not running")
                elif r is None:
                    bad.append(f"worker {i}: not started yet")
                elif isinstance(r, Exception):
                    bad.append(f"worker {i}: {type(r).__name__}")
                elif r[0] != 200:
                    bad.append(f"worker {i}: {r[1].strip()}")
            if bad:
                word = "unhealthy" if route == "/healthz" else "not ready"
                return 503, "text/plain", f"{word}: " + "; ".join(bad) + "\n"
            word = "ok" if route == "/healthz" else "ready"
            return 200, "text/plain", f"{word} ({self._workers} workers)\n"
        return 404, "text/plain", "not found: /metrics, /healthz, /readyz\n"

    def close(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for serve_forever, so only if it runs
            self._httpd.shutdown()
        self._httpd.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["AggregateServer", "merge"]
