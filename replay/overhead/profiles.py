"""Network path profiles: round-trip time, jitter and bandwidth, each from a stated source.

toxiproxy takes whole milliseconds and KB/s; a profile's RTT is split between the two
directions (upstream ``rtt // 2``, downstream the rest), its jitter likewise.
"""

from __future__ import annotations

from dataclasses import dataclass

from replay.errors import ReplayInputError


@dataclass(frozen=True, slots=True)
class PathProfile:
    name: str
    rtt_ms: int
    jitter_ms: int  # +- per direction, uniform (toxiproxy's latency toxic)
    down_kbit: int  # server -> client, kbit/s (per connection in toxiproxy)
    up_kbit: int  # client -> server
    source: str
    loss: float = 0.0  # per datagram, the UDP path only (toxiproxy cannot drop TCP's bytes)

    @property
    def up_ms(self) -> int:
        return self.rtt_ms // 2

    @property
    def down_ms(self) -> int:
        return self.rtt_ms - self.up_ms

    @property
    def up_jitter(self) -> int:
        return self.jitter_ms // 2

    @property
    def down_jitter(self) -> int:
        return self.jitter_ms - self.up_jitter

    def describe(self) -> str:
        return (f"RTT {self.rtt_ms} ms +- {self.jitter_ms} ms, {self.down_kbit / 1000:g} / "
                f"{self.up_kbit / 1000:g} Mbit/s down / up")


PROFILES: dict[str, PathProfile] = {p.name: p for p in (
    PathProfile("thesis", 90, 6, 5000, 1000,
                "the thesis's 'average round trip time latency on the Internet is about 90 "
                "milliseconds' (its reference [12]); 5 Mbit/s is Akamai's global average "
                "connection speed of early 2015 (State of the Internet, Q1 2015); the uplink "
                "and the jitter are chosen here"),
    PathProfile("lan", 1, 0, 100_000, 100_000,
                "a switched 100 Mbit/s LAN, ~1 ms RTT (toxiproxy's resolution is 1 ms)"),
    PathProfile("transatlantic", 76, 2, 50_000, 20_000,
                "New York - London, about 75 ms RTT in carriers' published latency figures; "
                "bandwidth chosen here"),
    PathProfile("mobile", 60, 20, 10_000, 3_000,
                "LTE: ~60 ms RTT with +-20 ms jitter, 10 / 3 Mbit/s (order of magnitude of "
                "crowd-sourced LTE measurements); chosen here, not fitted"),
)}


def get_profiles(names: str) -> list[PathProfile]:
    """``thesis,lan`` -> profiles; an unknown name is a ``ReplayInputError``."""
    out = []
    for n in (x.strip() for x in names.split(",")):
        if not n:
            continue
        if n not in PROFILES:
            raise ReplayInputError(f"unknown path profile {n!r} (known: "
                                   f"{', '.join(PROFILES)})")
        out.append(PROFILES[n])
    if not out:
        raise ReplayInputError("no path profile given")
    return out
