"""Flow records and the pure parsers for every flow layout we read.

Rules:
- Every timestamp becomes float seconds since the Unix epoch, UTC. Naive date-time strings
  (nfdump prints local time) are read in the zone given to the parser (UTC by default; the
  ingest layer runs ``nfdump`` with ``TZ=UTC`` so its output is already UTC).
- A layout is recognised from the header row (or, for header-less nfdump ``fmt:`` output, is
  named by the caller). A row that does not fit its layout raises ``MalformedRow`` with the
  source name and line number; it is never guessed at.
- Layouts: ``canonical`` (ours, see docs/replay.md), ``nfdump-legacy`` (the 48-column ``-o csv``
  of nfdump 1.7.4 and older: ``ts,te,td,sa,da,sp,dp,pr,...``), ``nfdump-new`` (the ``-o csv``
  of nfdump 1.7.5 and newer: ``firstSeen,duration,proto,srcAddr,srcPort,dstAddr,dstPort,...``,
  and any ``csv:`` custom format using the same column names), ``nfdump-fmt`` (the
  header-less ``|``-separated ``fmt:`` line our ingest asks nfdump for).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from replay.errors import MalformedRow, ReplayInputError

# Bounds on one row: anything longer is malformed, not truncated.
MAX_FIELD_CHARS = 512
# a flow's counter at most (an exabyte): a flow's sum of three still fits 64 bits
MAX_COUNT = 2**60
MAX_HOSTNAME_CHARS = 253

PROTO_NAMES = {"TCP": 6, "UDP": 17, "ICMP": 1, "ICMP6": 58, "GRE": 47, "ESP": 50, "SCTP": 132}

CANONICAL_COLUMNS = ("start", "end", "src", "dst", "sport", "dport", "proto", "packets",
                     "bytes", "sni")

# The fmt: string our ingest passes to nfdump (``-o fmt:...``), one token per field, in order.
NFDUMP_FMT = "%ts|%te|%sa|%da|%sp|%dp|%pr|%ipkt|%ibyt|%obyt"
NFDUMP_FMT_FIELDS = 10


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """One unidirectional flow, as NetFlow reports it. Times are UTC epoch seconds."""

    start: float
    end: float
    src: str
    dst: str
    sport: int
    dport: int
    proto: int
    packets: int
    bytes: int
    sni: str | None = None
    # arrival order in the trace (assigned by the workload builder; ties of start times are
    # broken by it); not part of the flow's identity
    seq: int = field(default=-1, compare=False)


RowParser = Callable[[Sequence[str], str, int], FlowRecord]


def parse_time(text: str, tz: tzinfo = UTC) -> float:
    """Parse a flow timestamp into UTC epoch seconds.

    Accepts ``YYYY-MM-DD HH:MM:SS[.fff]`` (naive: read in ``tz``), ISO 8601 with ``T`` and an
    offset or ``Z``, epoch seconds (``1366563600.25``) and epoch milliseconds (13+ digit
    integers, the nfdump ``csv-fast`` form). Raises ``ValueError`` otherwise.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty timestamp")
    if s[0].isdigit() and "-" not in s and ":" not in s:
        value = float(s)
        if "." not in s and len(s) >= 13:
            value /= 1000.0
        if not 0 <= value < 1e11:
            raise ValueError(f"timestamp out of range: {s!r}")
        return value
    iso = s.replace(" ", "T", 1)
    if iso.endswith("Z"):
        iso = iso[:-1] + "+00:00"
    dt = datetime.fromisoformat(iso)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return dt.timestamp()


def parse_duration(text: str) -> float:
    """Seconds from ``12.345`` or nfdump's ``HH:MM:SS.mmm`` (``fmt`` mode ``%td``)."""
    s = text.strip()
    if ":" in s:
        parts = s.split(":")
        if len(parts) != 3:
            raise ValueError(f"bad duration {s!r}")
        value = int(parts[0]) * 3600 + int(parts[1]) * 60 + float(parts[2])
    else:
        value = float(s)
    if not math.isfinite(value):
        raise ValueError(f"duration is not a finite number {s!r}")
    if value < 0:
        raise ValueError(f"negative duration {s!r}")
    return value


def parse_proto(text: str) -> int:
    s = text.strip().upper()
    if s.isdigit():
        n = int(s)
        if n > 255:
            raise ValueError(f"protocol out of range {s!r}")
        return n
    if s in PROTO_NAMES:
        return PROTO_NAMES[s]
    raise ValueError(f"unknown protocol {text.strip()!r}")


def parse_port(text: str) -> int:
    s = text.strip()
    # nfdump prints ICMP type.code as the destination port of ICMP flows.
    if "." in s:
        return 0
    n = int(s)
    if not 0 <= n <= 65535:
        raise ValueError(f"port out of range {s!r}")
    return n


def parse_count(text: str) -> int:
    """A non-negative counter; accepts nfdump's scaled forms ``1.2 M`` / ``3 K``."""
    s = text.strip()
    scale = 1
    for suffix, factor in (("K", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12)):
        if s.endswith(suffix):
            s = s[: -len(suffix)].strip()
            scale = factor
            break
    value = float(s) * scale if scale != 1 or "." in s else int(s)
    if not math.isfinite(value):  # "1e99999T", "inf", "nan": not a counter
        raise ValueError(f"counter is not a finite number {text!r}")
    if value < 0:
        raise ValueError(f"negative counter {text!r}")
    if value > MAX_COUNT:
        raise ValueError(f"counter out of range {text!r}")
    return int(value)


# a dotted quad without leading zeros is its own canonical form (no ipaddress object needed);
# a hostname of ASCII labels checked by one regular expression, as the loop below would
_CANONICAL_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
                             r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
_PLAIN_HOSTNAME = re.compile(r"(?:[a-z0-9_*-]{1,63}\.)*[a-z0-9_*-]{1,63}")


def parse_address(text: str) -> str:
    s = text.strip()
    if _CANONICAL_IPV4.fullmatch(s):
        return s
    if ".." in s:
        raise ValueError(f"abbreviated address {s!r}")
    return str(ipaddress.ip_address(s))


def parse_hostname(text: str) -> str | None:
    s = text.strip().rstrip(".").lower()
    if not s or s in {"0", "-"}:
        return None
    if len(s) > MAX_HOSTNAME_CHARS:
        raise ValueError("hostname too long")
    if _PLAIN_HOSTNAME.fullmatch(s):
        return s
    for label in s.split("."):
        if not label or len(label) > 63 or not all(c.isalnum() or c in "-_*" for c in label):
            raise ValueError(f"bad hostname {s!r}")
    return s


def _check_fields(fields: Sequence[str], source: str, line: int, want: int) -> None:
    if len(fields) < want:
        raise MalformedRow(source, line, f"expected at least {want} fields, got {len(fields)}")
    for f in fields:
        if len(f) > MAX_FIELD_CHARS:
            raise MalformedRow(source, line, "field too long")


def _wrap(source: str, line: int, build: Callable[[], FlowRecord]) -> FlowRecord:
    try:
        rec = build()
    except (ValueError, KeyError, IndexError) as exc:
        raise MalformedRow(source, line, str(exc) or exc.__class__.__name__) from None
    if rec.end < rec.start:
        raise MalformedRow(source, line, "flow ends before it starts")
    return rec


@dataclass(frozen=True)
class Layout:
    """A recognised layout: its name, how many header lines precede data, and a row parser."""

    name: str
    parse: RowParser
    has_header: bool


def _index(header: Sequence[str]) -> dict[str, int]:
    return {h.strip(): i for i, h in enumerate(header)}


def canonical_layout(header: Sequence[str]) -> Layout:
    idx = _index(header)
    missing = [c for c in CANONICAL_COLUMNS if c != "sni" and c not in idx]
    if missing:
        raise ReplayInputError(f"canonical CSV lacks columns: {', '.join(missing)}")
    need = max(idx[c] for c in CANONICAL_COLUMNS if c in idx) + 1
    sni_i = idx.get("sni")

    def parse(fields: Sequence[str], source: str, line: int) -> FlowRecord:
        _check_fields(fields, source, line, need)
        return _wrap(source, line, lambda: FlowRecord(
            start=parse_time(fields[idx["start"]]),
            end=parse_time(fields[idx["end"]]),
            src=parse_address(fields[idx["src"]]),
            dst=parse_address(fields[idx["dst"]]),
            sport=parse_port(fields[idx["sport"]]),
            dport=parse_port(fields[idx["dport"]]),
            proto=parse_proto(fields[idx["proto"]]),
            packets=parse_count(fields[idx["packets"]]),
            bytes=parse_count(fields[idx["bytes"]]),
            sni=parse_hostname(fields[sni_i]) if sni_i is not None else None,
        ))

    return Layout("canonical", parse, True)


def nfdump_legacy_layout(header: Sequence[str], tz: tzinfo = UTC) -> Layout:
    idx = _index(header)
    for c in ("ts", "te", "sa", "da", "sp", "dp", "pr", "ibyt"):
        if c not in idx:
            raise ReplayInputError(f"nfdump legacy CSV lacks column {c!r}")
    need = max(idx[c] for c in ("ts", "te", "sa", "da", "sp", "dp", "pr", "ibyt")) + 1
    obyt = idx.get("obyt")
    ipkt = idx.get("ipkt")
    opkt = idx.get("opkt")

    def parse(fields: Sequence[str], source: str, line: int) -> FlowRecord:
        _check_fields(fields, source, line, need)

        def build() -> FlowRecord:
            start = parse_time(fields[idx["ts"]], tz)
            end = parse_time(fields[idx["te"]], tz)
            # 1.7.4 and older print ts/te to the second; keep the finer td when it is there.
            if "td" in idx and fields[idx["td"]].strip():
                end = max(end, start + parse_duration(fields[idx["td"]]))
            ob = parse_count(fields[obyt]) if obyt is not None and obyt < len(fields) else 0
            ip = parse_count(fields[ipkt]) if ipkt is not None and ipkt < len(fields) else 0
            op = parse_count(fields[opkt]) if opkt is not None and opkt < len(fields) else 0
            return FlowRecord(start, end, parse_address(fields[idx["sa"]]),
                              parse_address(fields[idx["da"]]), parse_port(fields[idx["sp"]]),
                              parse_port(fields[idx["dp"]]), parse_proto(fields[idx["pr"]]),
                              ip + op, parse_count(fields[idx["ibyt"]]) + ob)

        return _wrap(source, line, build)

    return Layout("nfdump-legacy", parse, True)


def nfdump_new_layout(header: Sequence[str], tz: tzinfo = UTC) -> Layout:
    idx = _index(header)
    for c in ("firstSeen", "proto", "srcAddr", "dstAddr", "srcPort", "dstPort"):
        if c not in idx:
            raise ReplayInputError(f"nfdump CSV lacks column {c!r}")
    if "duration" not in idx and "lastSeen" not in idx:
        raise ReplayInputError("nfdump CSV has neither 'duration' nor 'lastSeen'")
    bytes_cols = [idx[c] for c in ("bytes", "inBytes", "outBytes") if c in idx]
    pkt_cols = [idx[c] for c in ("packets", "inPackets", "outPackets") if c in idx]
    sni_i = idx.get("sniName", idx.get("sni"))
    need = max(idx[c] for c in ("firstSeen", "proto", "srcAddr", "dstAddr", "srcPort",
                                "dstPort")) + 1

    def parse(fields: Sequence[str], source: str, line: int) -> FlowRecord:
        _check_fields(fields, source, line, need)

        def build() -> FlowRecord:
            start = parse_time(fields[idx["firstSeen"]], tz)
            if "lastSeen" in idx:
                end = parse_time(fields[idx["lastSeen"]], tz)
            else:
                end = start + parse_duration(fields[idx["duration"]])
            return FlowRecord(
                start, end, parse_address(fields[idx["srcAddr"]]),
                parse_address(fields[idx["dstAddr"]]), parse_port(fields[idx["srcPort"]]),
                parse_port(fields[idx["dstPort"]]), parse_proto(fields[idx["proto"]]),
                sum(parse_count(fields[i]) for i in pkt_cols),
                sum(parse_count(fields[i]) for i in bytes_cols),
                parse_hostname(fields[sni_i]) if sni_i is not None else None)

        return _wrap(source, line, build)

    return Layout("nfdump-new", parse, True)


def nfdump_fmt_layout(tz: tzinfo = UTC) -> Layout:
    """The header-less ``NFDUMP_FMT`` output (``|``-separated, padded with spaces)."""

    def parse(fields: Sequence[str], source: str, line: int) -> FlowRecord:
        if len(fields) != NFDUMP_FMT_FIELDS:
            raise MalformedRow(source, line,
                               f"expected {NFDUMP_FMT_FIELDS} fields, got {len(fields)}")
        return _wrap(source, line, lambda: FlowRecord(
            parse_time(fields[0], tz), parse_time(fields[1], tz), parse_address(fields[2]),
            parse_address(fields[3]), parse_port(fields[4]), parse_port(fields[5]),
            parse_proto(fields[6]), parse_count(fields[7]),
            parse_count(fields[8]) + parse_count(fields[9])))

    return Layout("nfdump-fmt", parse, False)


def detect_layout(header: Sequence[str], tz: tzinfo = UTC) -> Layout:
    """Recognise a CSV layout from its header row; ``ReplayInputError`` if none fits."""
    names = {h.strip() for h in header}
    if {"start", "src", "dst", "dport"} <= names:
        return canonical_layout(header)
    if {"ts", "te", "sa", "da"} <= names:
        return nfdump_legacy_layout(header, tz)
    if {"firstSeen", "srcAddr", "dstAddr"} <= names:
        return nfdump_new_layout(header, tz)
    shown = ",".join(h.strip() for h in header[:8])
    raise ReplayInputError(f"unrecognised flow CSV header: {shown}...")


def utc_offset_zone(hours: float) -> tzinfo:
    """A fixed-offset zone for naive timestamps written in local time."""
    return timezone(timedelta(hours=hours))


def format_canonical(rec: FlowRecord) -> list[str]:
    """A canonical CSV row (columns ``CANONICAL_COLUMNS``)."""
    return [f"{rec.start:.3f}", f"{rec.end:.3f}", rec.src, rec.dst, str(rec.sport),
            str(rec.dport), str(rec.proto), str(rec.packets), str(rec.bytes), rec.sni or ""]


# -- the nfdump CSV layouts (synthetic traces are written in them too) ---------------------
LEGACY_HEADER = [
    "ts", "te", "td", "sa", "da", "sp", "dp", "pr", "flg", "fwd", "stos", "ipkt", "ibyt", "opkt",
    "obyt", "in", "out", "sas", "das", "smk", "dmk", "dtos", "dir", "nh", "nhb", "svln", "dvln",
    "ismc", "odmc", "idmc", "osmc", "mpls1", "mpls2", "mpls3", "mpls4", "mpls5", "mpls6",
    "mpls7", "mpls8", "mpls9", "mpls10", "cl", "sl", "al", "ra", "eng", "exid", "tr",
]
NEW_HEADER = ["firstSeen", "duration", "proto", "srcAddr", "srcPort", "dstAddr", "dstPort",
              "packets", "bytes", "flows"]
FLOW_FORMATS = ("canonical", "nfdump-legacy", "nfdump-new")


def _stamp(t: float, ms: bool) -> str:
    d = datetime.fromtimestamp(t, UTC)
    return d.strftime("%Y-%m-%d %H:%M:%S") + (f".{d.microsecond // 1000:03d}" if ms else "")


def nfdump_legacy_row(r: FlowRecord) -> list[str]:
    """A row in nfdump <= 1.7.4 ``-o csv`` layout (48 columns, second-resolution times)."""
    row = ["0"] * len(LEGACY_HEADER)
    row[0], row[1] = _stamp(r.start, False), _stamp(r.end, False)
    row[2] = f"{r.end - r.start:.3f}"
    row[3], row[4], row[5], row[6] = r.src, r.dst, str(r.sport), str(r.dport)
    row[7] = {6: "TCP", 17: "UDP"}.get(r.proto, str(r.proto))
    row[8] = "...AP.SF"
    row[11], row[12] = str(r.packets), str(r.bytes)
    return row


def nfdump_new_row(r: FlowRecord) -> list[str]:
    """A row in nfdump >= 1.7.5 ``-o csv`` layout."""
    return [_stamp(r.start, True), f"{r.end - r.start:.3f}", str(r.proto), r.src, str(r.sport),
            r.dst, str(r.dport), str(r.packets), str(r.bytes), "1"]


