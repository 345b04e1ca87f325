"""Scenario: trace-driven load from a ``replay`` workload file, following its timing.

Input (``--workload FILE``): a workload file written by ``replay workload`` (header
``offset,kind,client,host,port,fingerprint,ssl_bytes``; only ``kind == request`` rows reach a
notary, ``client-hit`` rows were answered by the client's own cache), or a simple CSV with
the header ``t,host,port,fingerprint`` (``t`` in seconds from the start). An empty
fingerprint sends a GET.

Timing: request ``i`` is due at ``start + offset_i / --speed``. Each user takes the next due
request of its worker's share, sleeps until it is due and sends it, so with enough users
(``--trace-users``) the send times follow the trace (open loop); when every user is busy the
sends fall late, and the lateness is logged at the end (``replay run`` is the strict
open-loop replayer; this scenario is for locust's distributed load and reports).

Sharding: with ``--trace-workers N`` (set it to the number of locust worker processes),
worker ``k`` (locust's worker index) sends the rows with ``row_index % N == k``; together
the workers send every row exactly once. The :class:`TraceShape` runs ``--trace-users``
users until the trace's duration (plus 3 s) has passed, then stops the test.

A 503 for an unreachable target (dead sites are part of real traces) counts as a correct
answer; every other answer is validated as in the other scenarios.

    locust -f loadtests/trace.py --config loadtests/locust.conf --workload run/workload.csv \\
        --host http://127.0.0.1:8443 --notary-cert DATA/notary.pem
"""

from __future__ import annotations

import csv
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, constant, events, task
from notary_load import LoadTarget, post_validated, validator

log = logging.getLogger("trace")
GRACE = 3.0


def read_trace(path: str) -> Iterator[tuple[float, LoadTarget]]:
    """(offset seconds, target with fingerprint) for each request row, in file order; a
    ``.parquet`` workload is streamed in batches."""
    if path.lower().endswith(".parquet"):
        from replay.workload import read_workload

        for ev in read_workload(Path(path)):
            if ev.kind == "request":
                yield ev.offset, LoadTarget(ev.host, ev.port, ev.fingerprint)
        return
    with Path(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if header[:7] == ["offset", "kind", "client", "host", "port", "fingerprint",
                          "ssl_bytes"]:
            for row in reader:
                if row and row[1] == "request":
                    yield float(row[0]), LoadTarget(row[3], int(row[4]), row[5].strip())
        elif header[:4] == ["t", "host", "port", "fingerprint"]:
            for row in reader:
                if row:
                    yield float(row[0]), LoadTarget(row[1], int(row[2]), row[3].strip())
        else:
            raise ValueError(f"{path}: neither a replay workload file nor t,host,port,fingerprint")


def trace_duration(path: str) -> float:
    return max((offset for offset, _ in read_trace(path)), default=0.0)


class _Share:
    """This worker's rows of the trace, handed out in order to its users."""

    def __init__(self, path: str, index: int, workers: int, speed: float) -> None:
        self._rows = (r for i, r in enumerate(read_trace(path)) if i % workers == index)
        self.speed = speed
        self.t0 = time.monotonic()
        self.sent = 0
        self.late = 0  # sent more than 1 s after its due time
        self.max_lateness = 0.0

    def next(self) -> tuple[float, LoadTarget] | None:
        row = next(self._rows, None)
        if row is None:
            return None
        return self.t0 + row[0] / self.speed, row[1]


_share: _Share | None = None


def _my_share(environment: Any) -> _Share:
    global _share
    if _share is None:
        opts = environment.parsed_options
        if not opts.workload:
            raise ValueError("--workload is required for the trace scenario")
        workers = max(1, opts.trace_workers)
        index = max(0, getattr(environment.runner, "worker_index", 0)) % workers
        _share = _Share(opts.workload, index, workers, max(opts.speed, 1e-6))
    return _share


@events.test_stop.add_listener
def _report(environment: Any, **_: Any) -> None:
    if _share is not None:
        log.info("trace share: %d sent, %d more than 1 s late, max lateness %.3f s",
                 _share.sent, _share.late, _share.max_lateness)


class TraceUser(FastHttpUser):
    wait_time = constant(0)

    @task
    def replay_next(self) -> None:
        share = _my_share(self.environment)
        item = share.next()
        if item is None:
            gevent.sleep(0.5)  # this worker's share is done; the shape ends the test
            return
        due, target = item
        delay = due - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        lateness = time.monotonic() - due
        share.max_lateness = max(share.max_lateness, lateness)
        share.late += lateness > 1.0
        share.sent += 1
        if target.fingerprint:
            post_validated(self, target, target.fingerprint, "trace", unreachable_ok=True)
        else:
            self._get(target)

    def _get(self, target: LoadTarget) -> None:
        v = validator(self.host, self.environment.parsed_options.notary_cert)
        with self.client.get(target.path, name="trace-get", catch_response=True) as resp:
            if isinstance(v, str):
                resp.failure(v)
                return
            why = v.check(resp.status_code, resp.content or b"", None)
            if why is not None and not (resp.status_code == 503 and "unreachable" in
                                        resp.headers.get("Cache-Status", "")):
                resp.failure(why)
            else:
                resp.success()


class TraceShape(LoadTestShape):
    """``--trace-users`` users for the trace's duration (at ``--speed``) plus a grace."""

    def tick(self) -> tuple[int, float] | None:
        opts = self.runner.environment.parsed_options
        if not hasattr(self, "_duration"):
            self._duration = trace_duration(opts.workload) / max(opts.speed, 1e-6) + GRACE
        if self.get_run_time() > self._duration:
            return None
        users = max(1, opts.trace_users)
        return users, float(users)
