"""The per-row reference: flows to validation requests, the study's method as pure,
streaming functions. The columnar engine (:mod:`replay.columnar`) computes the same workload
and counters at speed; the tests and the equivalence benchmark compare the two.

Method (section 3.1/3.2 of the study): pair the two directions of a connection when the
exporter wrote one flow per direction (:class:`FlowPairer`); keep TCP flows to port 443; give
each destination a
name (SNI when the flow has it, then the user's address-to-name map, then reverse DNS results
gathered beforehand); drop and count the flows without a name; simulate a client-side cache
per source address: the first flow of a (source, name, port) pair becomes a notary request,
later flows of the pair within the client cache lifetime are client-cache hits.

Nothing here reads a clock or a file: the caller passes records in and gets events out, and
every stage is counted in ``StageCounters``.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from replay.errors import ReplayInputError
from replay.flows import FlowRecord
from replay.model import (
    KIND_CLIENT_HIT,
    KIND_REQUEST,
    FlowFilter,
    StageCounters,
    Target,
    WorkloadEvent,
    anonymise,
)


class FlowPairer:
    """Merge the two one-way flows of one connection into one client-to-server flow.

    Exporters such as nfpcapd, softflowd and most NetFlow v5/v9 routers write one flow per
    direction: client -> server:443 and server:443 -> client. Both halves carry the
    connection's bytes; counting only the first would drop the server's (usually larger)
    half from the SSL bytes and count the second as traffic on another port. A flow *to* a
    kept port (client half) and a flow *from* one (server half) with the reversed 5-tuple
    and overlapping times (within ``slack`` seconds) become one flow: the client half's
    direction, the earliest start, the latest end, both packet and byte counts. A half whose
    partner does not arrive within ``window`` seconds of stream time is released alone (a
    server half turned around, so that it counts as the connection it stands for). Flows on
    other ports and protocols pass through untouched. Memory: at most ``max_pending`` halves.
    """

    def __init__(self, flow_filter: FlowFilter, window: float = 120.0, slack: float = 2.0,
                 max_pending: int = 1_000_000) -> None:
        self.filter = flow_filter
        self.window = window
        self.slack = slack
        self.max_pending = max_pending
        self._pending: OrderedDict[tuple[str, int, str, int, int, bool], FlowRecord] = \
            OrderedDict()
        self._newest = float("-inf")
        self.paired = 0
        self.reverse_only = 0

    def _server_half(self, rec: FlowRecord) -> bool:
        return (rec.proto in self.filter.protocols and rec.sport in self.filter.ports
                and rec.dport not in self.filter.ports)

    def _client_half(self, rec: FlowRecord) -> bool:
        return rec.proto in self.filter.protocols and rec.dport in self.filter.ports

    def _overlap(self, a: FlowRecord, b: FlowRecord) -> bool:
        return a.start <= b.end + self.slack and b.start <= a.end + self.slack

    @staticmethod
    def _merge(client: FlowRecord, server: FlowRecord) -> FlowRecord:
        return FlowRecord(min(client.start, server.start), max(client.end, server.end),
                          client.src, client.dst, client.sport, client.dport, client.proto,
                          client.packets + server.packets, client.bytes + server.bytes,
                          client.sni or server.sni, max(client.seq, server.seq))

    def _turned(self, server: FlowRecord) -> FlowRecord:
        self.reverse_only += 1
        return FlowRecord(server.start, server.end, server.dst, server.src, server.dport,
                          server.sport, server.proto, server.packets, server.bytes, server.sni,
                          server.seq)

    def _release(self, key: tuple[str, int, str, int, int, bool], rec: FlowRecord,
                 ) -> FlowRecord:
        del self._pending[key]
        return self._turned(rec) if key[5] else rec

    def push(self, rec: FlowRecord) -> list[FlowRecord]:
        """The flows released by this one (paired, expired or passed through)."""
        out: list[FlowRecord] = []
        self._newest = max(self._newest, rec.start)
        server = self._server_half(rec)
        if not server and not self._client_half(rec):
            out.append(rec)
        else:
            if server:  # canonical key: client address and port first
                key = (rec.dst, rec.dport, rec.src, rec.sport, rec.proto, False)
            else:
                key = (rec.src, rec.sport, rec.dst, rec.dport, rec.proto, True)
            partner = self._pending.get(key)
            if partner is not None and self._overlap(partner, rec):
                del self._pending[key]
                self.paired += 1
                out.append(self._merge(partner, rec) if server else self._merge(rec, partner))
            else:
                own = (*key[:5], server)
                old = self._pending.pop(own, None)
                if old is not None:  # the same 5-tuple again: a new connection
                    out.append(self._turned(old) if server else old)
                self._pending[own] = rec
        while self._pending:
            key, first = next(iter(self._pending.items()))
            if first.start > self._newest - self.window and len(self._pending) <= \
                    self.max_pending:
                break
            out.append(self._release(key, first))
        return out

    def flush(self) -> list[FlowRecord]:
        return [self._release(k, r) for k, r in list(self._pending.items())]


class ReorderBuffer:
    """Release flows in start-time order from an almost-sorted stream, with bounded memory.

    NetFlow exporters emit a flow when it ends, so start times arrive out of order by up to
    the exporter's active timeout. The buffer holds flows until the newest start seen is more
    than ``window`` seconds past them. Flows with the same start leave in arrival order
    (``FlowRecord.seq`` when set, else the order of ``push``). A flow older than what was
    already released is late: ``push`` returns it in the second list so the caller can count
    it. ``max_items`` bounds memory; when full, the oldest flow is released early.
    """

    def __init__(self, window: float = 600.0, max_items: int = 2_000_000) -> None:
        if window < 0 or max_items < 1:
            raise ReplayInputError("reorder window must be >= 0 and max_items >= 1")
        self.window = window
        self.max_items = max_items
        self._heap: list[tuple[float, int, FlowRecord]] = []
        self._seq = 0
        self._newest = float("-inf")
        self._released = float("-inf")

    def push(self, rec: FlowRecord) -> tuple[list[FlowRecord], list[FlowRecord]]:
        if rec.start < self._released:
            return [], [rec]
        self._seq += 1
        heapq.heappush(self._heap, (rec.start, rec.seq if rec.seq >= 0 else self._seq, rec))
        self._newest = max(self._newest, rec.start)
        out: list[FlowRecord] = []
        while self._heap and (self._heap[0][0] <= self._newest - self.window
                              or len(self._heap) > self.max_items):
            start, _, r = heapq.heappop(self._heap)
            self._released = start
            out.append(r)
        return out, []

    def flush(self) -> list[FlowRecord]:
        out = [heapq.heappop(self._heap)[2] for _ in range(len(self._heap))]
        if out:
            self._released = out[-1].start
        return out


class Namer:
    """Give a flow's destination a name: SNI, then the user map, then reverse DNS results."""

    def __init__(self, name_map: Mapping[str, str] | None = None,
                 rdns: Mapping[str, str | None] | None = None) -> None:
        self.name_map = name_map or {}
        self.rdns = rdns or {}

    def name(self, rec: FlowRecord) -> tuple[str, str] | None:
        """``(name, source)`` with source ``sni``/``map``/``rdns``, or ``None``."""
        if rec.sni:
            return rec.sni, "sni"
        n = self.name_map.get(rec.dst)
        if n:
            return n, "map"
        r = self.rdns.get(rec.dst)
        if r:
            return r, "rdns"
        return None


class ClientCache:
    """The per-source-address client cache of the study's client VMs.

    ``lookup(client, host, port, now)`` returns True on a hit; on a miss it stores the entry
    (valid for ``lifetime`` seconds, ``None`` = for the whole trace, as in the study).
    ``max_entries`` bounds memory; the least recently used entry is evicted.
    """

    def __init__(self, lifetime: float | None = None, max_entries: int = 10_000_000) -> None:
        if lifetime is not None and lifetime <= 0:
            raise ReplayInputError("client cache lifetime must be positive")
        if max_entries < 1:
            raise ReplayInputError("client cache max_entries must be >= 1")
        self.lifetime = lifetime
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, int], float] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, client: str, host: str, port: int, now: float) -> bool:
        key = (client, host, port)
        expiry = self._entries.get(key)
        if expiry is not None and now < expiry:
            self._entries.move_to_end(key)
            return True
        self._entries[key] = now + self.lifetime if self.lifetime is not None else float("inf")
        self._entries.move_to_end(key)
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1
        return False


@dataclass(frozen=True)
class WorkloadConfig:
    flow_filter: FlowFilter = FlowFilter()
    client_cache_lifetime: float | None = None
    client_cache_max_entries: int = 10_000_000
    reorder_window: float = 600.0
    pair_window: float = 120.0
    salt: bytes = b"converge-replay"
    include_client_hits: bool = True
    trace_start: float | None = None


def build_workload(records: Iterable[FlowRecord], namer: Namer, config: WorkloadConfig,
                   counters: StageCounters,
                   targets: Mapping[str, Target] | None = None) -> Iterator[WorkloadEvent]:
    """Stream validation events from flow records (any order within the reorder window).

    ``counters.flows_read`` is incremented here for every record; the caller adds malformed
    rows it skipped. ``targets`` maps a name to the port and fingerprint to use (farm runs);
    names not in it keep the flow's port and an empty fingerprint.
    """
    targets = targets or {}
    # the pairer holds a half for up to pair_window seconds: the re-sorting must cover that
    reorder = ReorderBuffer(max(config.reorder_window, config.pair_window + 10.0))
    cache = ClientCache(config.client_cache_lifetime, config.client_cache_max_entries)
    t0 = config.trace_start
    pseudonyms: dict[str, str] = {}

    def process(rec: FlowRecord) -> WorkloadEvent | None:
        nonlocal t0
        counters.kept += 1
        counters.ssl_bytes_kept += rec.bytes
        if counters.first_start is None:
            counters.first_start = rec.start
        counters.last_start = rec.start
        if t0 is None:
            t0 = rec.start
        named = namer.name(rec)
        if named is None:
            counters.unnamed_dropped += 1
            return None
        host, source = named
        counters.named += 1
        counters.named_by[source] = counters.named_by.get(source, 0) + 1
        counters.ssl_bytes_named += rec.bytes
        client = pseudonyms.get(rec.src)
        if client is None:
            client = anonymise(rec.src, config.salt)
            if len(pseudonyms) < 1_000_000:
                pseudonyms[rec.src] = client
        target = targets.get(host)
        port = target.port if target else rec.dport
        fp = target.fingerprint if target else ""
        hit = cache.lookup(client, host, port, rec.start)
        counters.client_cache_evictions = cache.evictions
        if hit:
            counters.client_cache_hits += 1
            if not config.include_client_hits:
                return None
            kind = KIND_CLIENT_HIT
        else:
            counters.notary_requests += 1
            kind = KIND_REQUEST
        return WorkloadEvent(round(rec.start - t0, 6), kind, client, host, port, fp, rec.bytes)

    pairer = FlowPairer(config.flow_filter, config.pair_window)

    def admit(flows: list[FlowRecord]) -> Iterator[WorkloadEvent]:
        counters.paired, counters.reverse_only = pairer.paired, pairer.reverse_only
        for rec in flows:
            if not config.flow_filter.keep(rec):
                counters.filtered_out += 1
                continue
            released, late = reorder.push(rec)
            counters.late_dropped += len(late)
            for r in released:
                ev = process(r)
                if ev is not None:
                    yield ev

    for arrival, rec in enumerate(records):
        counters.flows_read += 1
        yield from admit(pairer.push(dataclasses.replace(rec, seq=arrival)))
    yield from admit(pairer.flush())
    for r in reorder.flush():
        ev = process(r)
        if ev is not None:
            yield ev
