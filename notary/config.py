"""Notary settings: defaults, a TOML ``--config`` file, and command-line flags (which win).

Every bound is a named setting here; the README's configuration table lists them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from notary.core.target import parse_ip, parse_port
from notary.errors import BadConfig, BadInput
from notary.proxyproto import parse_trusted
from notary.relay import RelaySettings, relay_settings_from
from notary.store.budget import Budget

MAX_CONFIG = 1024 * 1024


@dataclass
class Settings:
    data_dir: Path = Path("notary-data")
    listen: list[str] = field(default_factory=lambda: ["127.0.0.1:8443"])
    tls: bool = True
    db: Path | None = None
    sqlite_driver: str = "aiosqlite"  # aiosqlite | thread (the earlier executor, to compare)
    key: Path | None = None
    cert: Path | None = None
    signing_key: Path | None = None
    hostname: str = "localhost"
    workers: int = 1
    allow_target: list[str] = field(default_factory=list)
    resolve: list[str] = field(default_factory=list)
    hosts_file: Path | None = None
    probe_timeout: float = 2.0
    max_probes: int = 256
    resolver_threads: int = 16  # system name lookups in progress at once (notary/resolve.py)
    recheck_after: int = 86_400
    negative_ttl: float = 60.0
    lru_entries: int = 100_000
    # the store's budget (notary/store/budget.py, docs/operations.md "Sizing the store")
    store_max_records: int = 1_000_000  # records about the notary's own resolution
    store_max_bytes: int = 512 * 1024 * 1024
    store_ttl: int = 90 * 86_400  # seconds such a record is kept unused (0: for ever)
    named_max_records: int = 20_000  # records about addresses clients named
    named_max_bytes: int = 32 * 1024 * 1024
    named_ttl: int = 86_400
    max_body: int = 4096
    max_line: int = 8190
    max_field: int = 8190
    max_headers: int = 64
    keepalive_timeout: float = 15.0
    body_timeout: float = 10.0  # seconds to receive a request body, else 408
    tls_handshake_timeout: float = 10.0  # seconds for a client's TLS handshake
    ext_reuse: int = 1
    log_client_addresses: bool = False
    redis: str | None = None  # redis://host:port/db: share records through Redis
    redis_prefix: str = "converge:"
    redis_timeout: float = 1.0
    metrics_listen: str | None = None  # HOST:PORT for /metrics, /healthz, /readyz
    rate_limit: float = 10_000.0  # requests per second per client address (0: off)
    rate_burst: int = 20_000
    rate_clients: int = 100_000  # client addresses remembered by the rate limiter
    max_connections: int = 10_000  # open connections per process (0: off)
    probe_rate_limit: float = 1_000.0  # live probes per second per client address (0: off)
    probe_rate_burst: int = 2_000
    relay_listen: list[str] = field(default_factory=list)  # plain-HTTP CONNECT relay ports
    relay_port: int = 4242  # the only destination port the relay connects to
    max_tunnels: int = 256  # open relay connections per process
    client_share: float = 0.25  # of max_probes and max_tunnels one client address may hold
    group_share: float = 0.5  # of max_probes one client network (IPv4 /24, IPv6 /48) may hold
    probe_reserve: float = 0.25  # of max_probes kept for clients holding no probe
    tunnel_idle_timeout: float = 60.0  # seconds without a byte either way
    tunnel_max_bytes: int = 16 * 1024 * 1024  # bytes per tunnel, both directions
    relay_head_timeout: float = 10.0  # seconds to send the CONNECT head
    relay_rate_limit: float = 20.0  # relay CONNECTs per second per client address (0: off)
    relay_rate_burst: int = 200
    verifier: str = "perspective"  # perspective | ca | both (docs/rootstore.md)
    ca_roots: list[str] = field(default_factory=list)  # PEM files added to Mozilla's roots
    ca_trust: Path | None = None  # SHA-256 root list: restrict the CA verifier to these
    ca_no_mozilla: bool = False  # CA verifier trusts only --ca-roots
    transparency_log: bool = True  # the public log of observations (docs/transparency.md)
    log_key: Path | None = None  # Ed25519 log key (default DATA/log.key)
    log_origin: str | None = None  # checkpoint origin (default HOSTNAME/converge-log/<id>)
    log_witness: list[str] = field(default_factory=list)  # URL=VKEY of cosigning witnesses
    log_interval: float = 1.0  # seconds between sequencing batches
    log_proof_wait: float = 3.0  # seconds an answer waits for its entry's proof
    trusted_proxy: list[str] = field(default_factory=list)  # CIDRs whose PROXY v2 header counts

    @property
    def db_path(self) -> Path:
        return self.db or self.data_dir / "notary.sqlite3"

    @property
    def key_path(self) -> Path:
        return self.key or self.data_dir / "notary.key"

    @property
    def cert_path(self) -> Path:
        return self.cert or self.data_dir / "notary.pem"

    @property
    def signing_key_path(self) -> Path:
        return self.signing_key or self.data_dir / "signing.key"

    @property
    def log_key_path(self) -> Path:
        return self.log_key or self.data_dir / "log.key"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "transparency.sqlite3"

    def relay_settings(self) -> RelaySettings:
        """The bounce relay's bounds (raises :class:`BadConfig` when out of range)."""
        return relay_settings_from(
            self.relay_port, self.max_tunnels, self.tunnel_idle_timeout, self.tunnel_max_bytes,
            self.probe_timeout, self.relay_head_timeout, self.client_share, self.group_share,
        )

    def log_witnesses(self) -> list[tuple[str, str]]:
        """``--log-witness URL=VKEY`` pairs (raises :class:`BadConfig` when malformed)."""
        out = []
        for spec in self.log_witness:
            url, sep, vkey = spec.partition("=")
            if not sep or not url.startswith(("http://", "https://")) or vkey.count("+") < 2:
                raise BadConfig(f"--log-witness {spec!r}: expected URL=VKEY (the witness's "
                                "submission prefix and its name+id+key verifier key)")
            out.append((url, vkey))
        return out

    def budget(self) -> Budget:
        """The store's budget (raises :class:`BadConfig` when out of range)."""
        budget = Budget(self.store_max_records, self.store_max_bytes, self.store_ttl,
                        self.named_max_records, self.named_max_bytes, self.named_ttl)
        budget.check()
        return budget

    def listen_addrs(self) -> list[tuple[str, int]]:
        return [parse_listen(spec) for spec in self.listen]

    def check(self) -> None:
        """Raise :class:`BadConfig` for any out-of-range value."""
        self.listen_addrs()
        positive = {
            "workers": self.workers,
            "probe_timeout": self.probe_timeout,
            "max_probes": self.max_probes,
            "resolver_threads": self.resolver_threads,
            "lru_entries": self.lru_entries,
            "max_body": self.max_body,
            "body_timeout": self.body_timeout,
            "tls_handshake_timeout": self.tls_handshake_timeout,
            "log_interval": self.log_interval,
            "log_proof_wait": self.log_proof_wait,
        }
        for name, value in positive.items():
            if value <= 0:
                raise BadConfig(f"{name} must be positive, got {value}")
        if self.recheck_after < 0 or self.negative_ttl < 0:
            raise BadConfig("recheck_after and negative_ttl must not be negative")
        if self.workers > 64:
            raise BadConfig("workers must be at most 64")
        if self.resolver_threads > 1024:
            raise BadConfig("resolver_threads must be at most 1024")
        if self.rate_limit < 0 or self.max_connections < 0 or self.probe_rate_limit < 0:
            raise BadConfig(
                "rate_limit, probe_rate_limit and max_connections must not be negative"
            )
        if self.relay_rate_limit < 0 or self.relay_rate_burst < 1:
            raise BadConfig("relay_rate_limit must not be negative and relay_rate_burst must "
                            "be positive")
        if (self.rate_burst < 1 or self.probe_rate_burst < 1 or self.rate_clients < 1
                or self.redis_timeout <= 0):
            raise BadConfig("rate_burst, probe_rate_burst, rate_clients and redis_timeout "
                            "must be positive")
        self.log_witnesses()
        parse_trusted(self.trusted_proxy)
        for name in ("client_share", "group_share", "probe_reserve"):
            if not 0 <= getattr(self, name) <= 1:
                raise BadConfig(f"{name} must be from 0 to 1, got {getattr(self, name)}")
        if self.metrics_listen is not None:
            parse_listen(self.metrics_listen)
        for spec in self.relay_listen:
            parse_listen(spec)
        self.relay_settings()
        self.budget()
        if self.sqlite_driver not in ("aiosqlite", "thread"):
            raise BadConfig(f"sqlite_driver must be aiosqlite or thread, got "
                            f"{self.sqlite_driver!r}")
        if self.verifier not in ("perspective", "ca", "both"):
            raise BadConfig(f"verifier must be perspective, ca or both, got {self.verifier!r}")
        if self.redis is not None and not self.redis.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise BadConfig(f"redis must be a redis://, rediss:// or unix:// URL: {self.redis!r}")


def parse_listen(spec: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port)."""
    host, sep, port_text = spec.rpartition(":")
    if not sep or not host:
        raise BadConfig(f"--listen expects HOST:PORT, got {spec!r}")
    if host.startswith("["):
        if not host.endswith("]") or parse_ip(host) is None:
            raise BadConfig(f"--listen: bad IPv6 address in {spec!r}")
        host = host[1:-1]
    try:
        port = int(port_text) if port_text == "0" else parse_port(port_text)
    except BadInput as exc:
        raise BadConfig(f"--listen {spec!r}: {exc.message}") from exc
    return host, port


_PATHS = {"data_dir", "db", "key", "cert", "signing_key", "hosts_file", "ca_trust", "log_key"}


def _coerce(name: str, value: Any, template: Any) -> Any:
    if name in _PATHS:
        if not isinstance(value, str):
            raise BadConfig(f"config key {name!r} must be a string path")
        return Path(value)
    if isinstance(template, bool):
        if not isinstance(value, bool):
            raise BadConfig(f"config key {name!r} must be true or false")
        return value
    if isinstance(template, int) and not isinstance(template, bool):
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadConfig(f"config key {name!r} must be an integer")
        return value
    if isinstance(template, float):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise BadConfig(f"config key {name!r} must be a number")
        return float(value)
    if isinstance(template, list):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadConfig(f"config key {name!r} must be a list of strings")
        return list(value)
    if not isinstance(value, str):
        raise BadConfig(f"config key {name!r} must be a string")
    return value


def load_toml(path: Path) -> dict[str, Any]:
    """Read a TOML config file into a dict of :class:`Settings` field values."""
    try:
        if path.stat().st_size > MAX_CONFIG:
            raise BadConfig(f"config file {path} is larger than {MAX_CONFIG} bytes")
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadConfig(f"cannot read config file {path}: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadConfig(f"config file {path} is not valid TOML: {exc}") from exc
    except RecursionError as exc:  # deeply nested arrays or tables
        raise BadConfig(f"config file {path} is nested too deeply") from exc
    table = raw.get("notary", raw)
    if not isinstance(table, dict):
        raise BadConfig(f"config file {path}: [notary] must be a table")
    defaults = Settings()
    known = {f.name for f in fields(Settings)}
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in known:
            raise BadConfig(f"config file {path}: unknown key {key!r}")
        out[name] = _coerce(name, value, getattr(defaults, name))
    return out


__all__ = ["Settings", "load_toml", "parse_listen"]
