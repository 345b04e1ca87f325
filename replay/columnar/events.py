"""Phase 2, per partition: pair, filter, sort, name, pseudonymise, client cache."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import polars as pl

from replay.columnar.schema import EVENT_SCHEMA, FLOW_SCHEMA, PAIR_SLACK, EngineConfig
from replay.model import KIND_CLIENT_HIT, KIND_REQUEST, FlowFilter, StageCounters


def _pair(df: pl.DataFrame, flt: FlowFilter) -> tuple[pl.DataFrame, int, int]:
    """Merge each client half with the overlapping server half of the reversed 5-tuple;
    lone server halves turned around. Returns (flows, paired, reverse_only)."""
    ports, protos = sorted(flt.ports), sorted(flt.protocols)
    is_proto = pl.col("proto").is_in(protos)
    client = is_proto & pl.col("dport").is_in(ports)
    server = is_proto & pl.col("sport").is_in(ports) & ~pl.col("dport").is_in(ports)
    if not _columns(df, "proto", "sport", "dport").select(server.any()).item():
        return df, 0, 0  # no server halves: nothing to pair (bidirectional records)
    df = df.with_columns(client.alias("_c"), server.alias("_s"))
    halves_c = df.filter(pl.col("_c"))
    halves_s = df.filter(pl.col("_s")).rename(
        {"src": "dst", "dst": "src", "sport": "dport", "dport": "sport"})
    rest = df.filter(~pl.col("_c") & ~pl.col("_s")).drop("_c", "_s")
    key = ["src", "sport", "dst", "dport", "proto"]
    pairs = halves_c.select(*key, "seq", "start", "end").join(
        halves_s.select(*key, pl.col("seq").alias("s_seq"), pl.col("start").alias("s_start"),
                        pl.col("end").alias("s_end")), on=key, how="inner")
    pairs = pairs.filter((pl.col("start") <= pl.col("s_end") + PAIR_SLACK)
                         & (pl.col("s_start") <= pl.col("end") + PAIR_SLACK))
    # one partner each: the server half closest in start time, then each used once
    pairs = (pairs.with_columns((pl.col("start") - pl.col("s_start")).abs().alias("_gap"))
             .sort(["seq", "_gap", "s_seq"]).unique("seq", keep="first", maintain_order=True)
             .sort(["s_seq", "_gap", "seq"]).unique("s_seq", keep="first", maintain_order=True)
             .select("seq", "s_seq"))
    sv = halves_s.select(pl.col("seq").alias("s_seq"), pl.col("start").alias("s_start"),
                         pl.col("end").alias("s_end"),
                         pl.col("bytes").alias("s_bytes"), pl.col("sni").alias("s_sni"))
    merged = (halves_c.join(pairs, on="seq", how="inner").join(sv, on="s_seq", how="inner")
              .with_columns(pl.min_horizontal("start", "s_start").alias("start"),
                            pl.max_horizontal("end", "s_end").alias("end"),
                            (pl.col("bytes") + pl.col("s_bytes")).alias("bytes"),
                            pl.coalesce("sni", "s_sni").alias("sni"),
                            pl.max_horizontal("seq", "s_seq").alias("seq")))
    lone_c = halves_c.join(pairs, on="seq", how="anti")
    lone_s = halves_s.join(pairs.select(pl.col("s_seq").alias("seq")), on="seq", how="anti")
    cols = list(FLOW_SCHEMA)
    out = pl.concat([rest.select(cols), merged.select(cols), lone_c.select(cols),
                     lone_s.select(cols)])
    return out, pairs.height, lone_s.height


def _columns(df: pl.DataFrame, *names: str) -> pl.DataFrame:
    """Some of ``df``'s columns, as they are. The ingest's flows come in many chunks, not the
    same in every column (a column of one value is one chunk per batch): polars' ``select``
    and ``with_columns`` first copy every column of such a frame into one chunk (for 2 M
    flows about 0.03 s and 150 MB of new pages). Tests of a few columns do not need it, and
    the names' join copies only the columns it joins (a join over many chunks costs more
    than copying them first)."""
    return pl.DataFrame([df.get_column(n) for n in names])


def _in_order(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` sorted by (start, seq): as it is, when it already is (a trace read in time
    order: both columns ascending), which costs one pass instead of a sort."""
    if df["seq"].is_sorted() and df["start"].is_sorted():
        return df
    return df.sort(["start", "seq"])


def _packed_key(df: pl.DataFrame) -> pl.Expr | None:
    """(client, host, port) as one integer, when every host is a name from the map (no SNI,
    no reverse DNS: ``name_id`` numbers the names and ``client_id`` the clients, each one to
    one): hashing one integer per flow costs a third of hashing the three columns. None:
    another case."""
    if df.height == 0 or "name_id" not in df.columns or "client_id" not in df.columns \
            or any(df[c].null_count() < df.height for c in ("sni", "name_rdns")
                   if c in df.columns):
        return None
    lo, hi, clients, names = df.select(
        pl.col("port").min().alias("lo"), pl.col("port").max().alias("hi"),
        pl.col("client_id").max() + 1, pl.col("name_id").max() + 1).row(0)
    if lo is None or lo < 0 or hi > 0xFFFF or clients * names * 0x10000 >= 1 << 63:
        return None
    width = pl.lit(int(names), pl.UInt64)
    key: pl.Expr = ((pl.col("client_id").cast(pl.UInt64) * width
                     + pl.col("name_id").cast(pl.UInt64)) * 0x10000
                    + pl.col("port").cast(pl.UInt64))
    return key


def _client_cache(df: pl.DataFrame, lifetime: float | None) -> pl.Series:
    """``True`` where a flow is a client-cache hit (``df`` sorted by time, then arrival)."""
    key = ["client", "host", "port"]
    if lifetime is None:  # the first flow of each (client, host, port) asks the notary
        packed = _packed_key(df)
        first = pl.struct(key) if packed is None else packed
        return df.select((~first.is_first_distinct()).alias("hit"))["hit"]
    order = df.with_row_index("_i").sort([*key, "start", "seq"])
    times = order["start"].to_list()
    groups = order.select(pl.struct(key).rank("dense").alias("g"))["g"].to_list()
    hits = [False] * len(times)
    expiry = -math.inf
    last_group = None
    for i, (t, g) in enumerate(zip(times, groups, strict=True)):
        if g != last_group:
            last_group, expiry = g, -math.inf
        if t < expiry:
            hits[i] = True
        else:
            expiry = t + lifetime
    return (order.select("_i").with_columns(pl.Series("hit", hits)).sort("_i")["hit"])


def exact_sum(values: pl.Series) -> int:
    """The sum of an integer column as Python sums it: 64 bits wrap (a hostile trace's
    counters near their bound reach it in a few flows), so past them in 128 bits."""
    if values.len() == 0:
        return 0
    bound = max(abs(int(values.min())), abs(int(values.max())))  # type: ignore[arg-type]
    if bound * values.len() < 2**63:
        return int(values.sum())
    return int(values.cast(pl.Int128).sum())


def partition_events(df: pl.DataFrame, cfg: EngineConfig, names: pl.DataFrame,
                     rdns: pl.DataFrame, targets: pl.DataFrame,
                     pseudonyms: Callable[[pl.Series], pl.DataFrame],
                     sources: pl.Series | None = None,
                     ) -> tuple[pl.DataFrame, StageCounters]:
    """Phase 2 for one partition's flows: its events sorted by (start, seq). ``sources``:
    every distinct source address of these flows as read (may be more), which saves finding
    the clients among the named flows."""
    c = StageCounters()
    empty = pl.DataFrame(schema=EVENT_SCHEMA)
    if df.height == 0:
        return empty, c
    flows, c.paired, c.reverse_only = _pair(df, cfg.flow_filter)
    ports, protos = sorted(cfg.flow_filter.ports), sorted(cfg.flow_filter.protocols)
    keep = pl.col("proto").is_in(protos) & pl.col("dport").is_in(ports)
    mask = _columns(flows, "proto", "dport").select(keep.alias("keep"))["keep"]
    kept = _in_order(flows if mask.all() else flows.filter(mask))
    c.filtered_out = flows.height - kept.height
    c.kept = kept.height
    if kept.height == 0:
        return empty, c
    c.ssl_bytes_kept = exact_sum(kept["bytes"])
    c.first_start = float(kept["start"][0])
    c.last_start = float(kept["start"][-1])
    # only the columns the events need (each join and filter copies every column); eager
    # joins: polars' lazy join of a small table took four times as long here
    if rdns.height == 0 and kept["sni"].null_count() == kept.height:
        # names from the map alone: an inner join is the join and the filter in one pass,
        # and no column of nulls is carried along
        named = _columns(kept, "start", "seq", "src", "dst", "dport", "bytes").rechunk().join(
            names, left_on="dst", right_on="address", how="inner",
            maintain_order="left").rename({"name": "host"})
        c.unnamed_dropped = kept.height - named.height
        c.named = named.height
        c.named_by = {"map": named.height} if named.height else {}
    else:
        named = _columns(kept, "start", "seq", "src", "dst", "dport", "bytes", "sni")\
            .rechunk().join(names, left_on="dst", right_on="address", how="left",
                            maintain_order="left")
        if rdns.height:
            named = named.join(rdns, left_on="dst", right_on="address", how="left",
                               suffix="_rdns", maintain_order="left")
        else:
            named = named.with_columns(pl.lit(None, pl.String).alias("name_rdns"))
        named = named.with_columns(pl.coalesce("sni", "name", "name_rdns").alias("host"))\
            .filter(pl.col("host").is_not_null())
        c.unnamed_dropped = kept.height - named.height
        c.named = named.height
        # named by SNI where there is one, else by the map, else by reverse DNS
        by_sni = named.height - named["sni"].null_count()
        by_map = int(named.select((pl.col("sni").is_null() & pl.col("name").is_not_null())
                                  .sum()).item())
        c.named_by = {k: v for k, v in (("sni", by_sni), ("map", by_map),
                                        ("rdns", named.height - by_sni - by_map)) if v}
    # the partition's flows are not needed any more: freed here (the caller keeps none), so
    # what follows reuses their memory instead of touching new pages
    del df, flows, kept
    c.ssl_bytes_named = exact_sum(named["bytes"])
    # the clients: the sources of the named flows, or (cheaper than finding those among a
    # million flows) all the sources read, when no flow was turned around (a lone server half
    # has the client as its destination) and they are few
    if sources is None or c.reverse_only or sources.len() * 4 > named.height:
        sources = named["src"].unique()
    clients = pseudonyms(sources)
    clients = clients.with_columns(pl.col("client").rank("dense").alias("client_id"))
    named = named.join(clients, on="src", how="left", maintain_order="left")
    if targets.height:
        named = named.join(targets, on="host", how="left", maintain_order="left")
    else:  # no farm: every event keeps its own port
        named = named.with_columns(pl.lit(None, pl.Int64).alias("target_port"),
                                   pl.lit(None, pl.String).alias("target_fingerprint"))
    named = named.with_columns(pl.coalesce("target_port", "dport").alias("port"),
                               pl.col("target_fingerprint").fill_null("").alias("fingerprint"))
    named = named.with_columns(_client_cache(named, cfg.client_cache_lifetime).alias("hit"))
    c.client_cache_hits = int(named["hit"].sum())
    c.notary_requests = named.height - c.client_cache_hits
    events = named.with_columns(
        pl.when(pl.col("hit")).then(pl.lit(KIND_CLIENT_HIT)).otherwise(pl.lit(KIND_REQUEST))
        .alias("kind"), pl.col("bytes").alias("ssl_bytes"))
    if not cfg.include_client_hits:
        events = events.filter(~pl.col("hit"))
    return events.select(list(EVENT_SCHEMA)).cast(EVENT_SCHEMA), c  # type: ignore[arg-type]


def sum_counters(parts: Iterable[StageCounters]) -> StageCounters:
    total = StageCounters()
    for c in parts:
        for name in ("paired", "reverse_only", "filtered_out", "kept", "named",
                     "unnamed_dropped", "client_cache_hits", "notary_requests",
                     "ssl_bytes_kept", "ssl_bytes_named"):
            setattr(total, name, getattr(total, name) + getattr(c, name))
        for k, v in c.named_by.items():
            total.named_by[k] = total.named_by.get(k, 0) + v
        if c.first_start is not None:
            total.first_start = c.first_start if total.first_start is None else min(
                total.first_start, c.first_start)
        if c.last_start is not None:
            total.last_start = c.last_start if total.last_start is None else max(
                total.last_start, c.last_start)
    return total
