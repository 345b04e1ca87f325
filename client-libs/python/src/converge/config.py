"""Configuration directory: discovery, ``converge.config`` and the notary bundles.

Discovery order (first that applies wins):

1. an explicit directory argument (must exist);
2. ``$CONVERGE_CONFIG_DIR`` (must exist when set);
3. ``~/.config/converge`` (``$XDG_CONFIG_HOME/converge`` when that is set), if it exists;
4. ``/usr/local/etc/converge`` (the 2014 client libraries' path), if it exists.

Layout (compatible with the surviving Java client)::

    converge.config            JSON, every key optional (see Config below)
    notaries-available/*.notary
    notaries-enabled/*.notary  symlinks to ../notaries-available/...

``notaries-dir`` names the folder holding ``notaries-available/`` and ``notaries-enabled/``.
The 2014 client libraries' configuration instead points ``notaries-dir`` at the enabled
folder itself (``/usr/local/etc/converge/notaries-enabled/``): a ``notaries-dir`` that holds
neither subfolder but ``.notary`` files is that layout, and every ``.notary`` file in it (a
symlink or not) is an enabled notary. Every language reads both (vectors ``config.json``).

``converge.config`` keys (relative paths are relative to the directory):

========================  ============  ==================================================
key                       default       meaning
========================  ============  ==================================================
``db``                    cache.sqlite3 local fingerprint cache (legacy add-on schema)
``userdb``                none          a per-user cache: read first, written instead of db
``notaries-dir``          ``.``         where notaries-available/ and -enabled/ live, or
                                        the enabled folder itself (the 2014 layout)
``notary-agreement``      majority      consensus | majority | minority
``quorum``                3             how many distinct logical notaries to ask
``connect-timeout``       3             seconds for TCP + TLS to one notary host
``notary-timeout``        5             seconds for one notary's whole answer
``total-timeout``         10            seconds for the whole check
``cache-lifetime``        604800        seconds a cached fingerprint is trusted; null = ever
``stand-aside``           true          unreachable notaries do not count (else = failure)
``early-return``          true          stop waiting once the verdict cannot change
``bounce``                false         tunnel queries through one randomly chosen enabled
                                        notary's relay (it does not vote)
``bounce-port``           4242          the notaries' port behind a relay
``max-response-bytes``    262144        bound on one notary response
``extended``              prefer        ``converge-answer/1`` use: ``off`` (legacy only),
                                        ``prefer`` (extended with notaries whose bundle
                                        offers it, legacy with the others), ``fallback``
                                        (as prefer, and legacy when such a notary answers
                                        the extended request with 400/404/405/501),
                                        ``require`` (ask only notaries that offer it)
``extended-nonce``        true          send a fresh random nonce with every extended query
``max-skew``              300           seconds an extended answer's time may differ from
                                        the local clock
========================  ============  ==================================================

A verification failure of an extended answer is a failure vote of that notary, never a
reason to fall back to the legacy protocol.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bundle import NotaryBundle, parse_bundle
from .errors import BundleError, ConfigError
from .extended import DEFAULT_MAX_SKEW, MODES, Mode
from .policy import Policy

CONFIG_FILE = "converge.config"
ENV_VAR = "CONVERGE_CONFIG_DIR"
SYSTEM_DIR = Path("/usr/local/etc/converge")
MAX_CONFIG_BYTES = 64 * 1024
MAX_NOTARIES = 64
DEFAULT_CACHE_LIFETIME = 7 * 24 * 3600

_KNOWN_KEYS = {
    "db",
    "userdb",
    "notaries-dir",
    "notary-agreement",
    "quorum",
    "connect-timeout",
    "notary-timeout",
    "total-timeout",
    "cache-lifetime",
    "stand-aside",
    "early-return",
    "bounce",
    "bounce-port",
    "max-response-bytes",
    "extended",
    "extended-nonce",
    "max-skew",
}


@dataclass(frozen=True)
class Config:
    """Everything a check needs. Build with :func:`load_config` or directly (tests)."""

    directory: Path | None
    db: Path | None
    userdb: Path | None = None
    notaries_dir: Path | None = None
    agreement: Policy = Policy.MAJORITY
    quorum: int = 3
    connect_timeout: float = 3.0
    notary_timeout: float = 5.0
    total_timeout: float = 10.0
    cache_lifetime: float | None = DEFAULT_CACHE_LIFETIME
    stand_aside: bool = True
    early_return: bool = True
    max_response_bytes: int = 256 * 1024
    bounce: bool = False
    bounce_port: int = 4242
    extended: Mode = "prefer"
    extended_nonce: bool = True
    # extended queries keep a direct connection open for the next one (an API setting, not a
    # key of the configuration file the languages share)
    keep_alive: bool = True
    max_skew: int = DEFAULT_MAX_SKEW
    bundles: tuple[NotaryBundle, ...] | None = field(default=None, compare=False)

    def notaries(self) -> list[NotaryBundle]:
        """The enabled logical notaries, de-duplicated by name (first file name wins)."""
        if self.bundles is not None:
            found = list(self.bundles)
        elif self.notaries_dir is None:
            found = []
        else:
            found = [b for b, enabled, _ in list_notaries(self.notaries_dir) if enabled]
        seen: set[str] = set()
        out = []
        for b in found:
            if b.name not in seen:
                seen.add(b.name)
                out.append(b)
        return out


def _user_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "converge"


def default_user_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where the CLI creates a configuration when none exists."""
    return _user_dir(os.environ if env is None else env)


def discover_config_dir(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path:
    """Find the configuration directory (see the module docstring for the order)."""
    env = os.environ if env is None else env
    if explicit is not None:
        p = Path(explicit)
        if not p.is_dir():
            raise ConfigError(f"configuration directory {p} does not exist")
        return p
    if env.get(ENV_VAR):
        p = Path(env[ENV_VAR])
        if not p.is_dir():
            raise ConfigError(f"${ENV_VAR}={p} is not a directory")
        return p
    for p in (_user_dir(env), SYSTEM_DIR):
        if p.is_dir():
            return p
    raise ConfigError(
        f"no configuration: set ${ENV_VAR}, or create {_user_dir(env)} or {SYSTEM_DIR}"
    )


def _number(raw: Mapping[str, Any], key: str, default: float, *, low: float, high: float) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not low <= v <= high:
        raise ConfigError(f"{key} must be a number in [{low}, {high}]")
    return float(v)


def _bool(raw: Mapping[str, Any], key: str, default: bool) -> bool:
    v = raw.get(key, default)
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false")
    return v


def _path(base: Path, raw: Mapping[str, Any], key: str, default: str | None) -> Path | None:
    v = raw.get(key, default)
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{key} must be a path")
    p = Path(v).expanduser()
    return p if p.is_absolute() else base / p


def parse_config(directory: Path, raw: Mapping[str, Any]) -> Config:
    """Validate the decoded ``converge.config`` of ``directory`` (pure apart from paths)."""
    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(f"unknown configuration keys: {', '.join(sorted(unknown))}")
    bounce_port = raw.get("bounce-port", 4242)
    if (
        isinstance(bounce_port, bool)
        or not isinstance(bounce_port, int)
        or not (0 < bounce_port < 65536)
    ):
        raise ConfigError("bounce-port must be an integer port 1..65535")
    lifetime = raw.get("cache-lifetime", DEFAULT_CACHE_LIFETIME)
    if lifetime is not None:
        lifetime = _number(
            raw, "cache-lifetime", DEFAULT_CACHE_LIFETIME, low=0, high=10 * 365 * 86400
        )
    quorum = raw.get("quorum", 3)
    if isinstance(quorum, bool) or not isinstance(quorum, int) or not 1 <= quorum <= 16:
        raise ConfigError("quorum must be an integer 1..16")
    max_bytes = raw.get("max-response-bytes", 256 * 1024)
    if (
        isinstance(max_bytes, bool)
        or not isinstance(max_bytes, int)
        or not (1024 <= max_bytes <= 16 * 1024 * 1024)
    ):
        raise ConfigError("max-response-bytes must be an integer 1024..16777216")
    extended = raw.get("extended", "prefer")
    if extended not in MODES:
        raise ConfigError(f"extended must be one of {', '.join(MODES)}")
    max_skew = raw.get("max-skew", DEFAULT_MAX_SKEW)
    if isinstance(max_skew, bool) or not isinstance(max_skew, int) or not 0 <= max_skew <= 86400:
        raise ConfigError("max-skew must be an integer 0..86400 (seconds)")
    agreement = raw.get("notary-agreement", "majority")
    if not isinstance(agreement, str):
        raise ConfigError("notary-agreement must be a string")
    return Config(
        directory=directory,
        db=_path(directory, raw, "db", "cache.sqlite3"),
        userdb=_path(directory, raw, "userdb", None),
        notaries_dir=_path(directory, raw, "notaries-dir", "."),
        agreement=Policy.parse(agreement),
        quorum=quorum,
        connect_timeout=_number(raw, "connect-timeout", 3.0, low=0.01, high=600),
        notary_timeout=_number(raw, "notary-timeout", 5.0, low=0.01, high=600),
        total_timeout=_number(raw, "total-timeout", 10.0, low=0.01, high=3600),
        cache_lifetime=lifetime,
        stand_aside=_bool(raw, "stand-aside", True),
        early_return=_bool(raw, "early-return", True),
        max_response_bytes=max_bytes,
        bounce=_bool(raw, "bounce", False),
        bounce_port=bounce_port,
        extended=extended,
        extended_nonce=_bool(raw, "extended-nonce", True),
        max_skew=max_skew,
    )


def load_config(directory: str | os.PathLike[str] | None = None) -> Config:
    """Discover and load a configuration directory."""
    d = discover_config_dir(directory)
    f = d / CONFIG_FILE
    raw: Any = {}
    if f.exists():
        try:
            data = f.read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read {f}: {e}") from e
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{f} larger than {MAX_CONFIG_BYTES} bytes")
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ConfigError(f"{f} is not JSON: {e}") from e
        if not isinstance(raw, dict):
            raise ConfigError(f"{f} must hold a JSON object")
    return parse_config(d, raw)


# ------------------------------------------------------------------ notary bundle files


def _slug(name: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return (s or "notary")[:60]


def _has_subfolders(notaries_dir: Path) -> bool:
    return (notaries_dir / "notaries-available").is_dir() or (
        notaries_dir / "notaries-enabled").is_dir()


def is_flat_layout(notaries_dir: Path) -> bool:
    """Whether ``notaries_dir`` is the 2014 layout's enabled folder: it holds ``.notary``
    files and neither ``notaries-available/`` nor ``notaries-enabled/`` (module rules)."""
    return not _has_subfolders(notaries_dir) and any(notaries_dir.glob("*.notary"))


def where_notaries_are_read(notaries_dir: Path | None) -> str:
    """Where :func:`list_notaries` looks, for messages ("no notaries enabled (looked in ...)")."""
    if notaries_dir is None:
        return "no notaries-dir"
    standard = f"{notaries_dir / 'notaries-enabled'}/"
    if _has_subfolders(notaries_dir):
        return standard
    return f"{standard} and {notaries_dir}/*.notary"


def list_notaries(notaries_dir: Path) -> list[tuple[NotaryBundle, bool, Path]]:
    """Every bundle in ``notaries-available/``: (bundle, enabled?, file), sorted by file.

    Also counts bundles placed directly in ``notaries-enabled/`` (not symlinks) as enabled.
    A file that does not parse raises :class:`BundleError` naming it.
    """
    avail = notaries_dir / "notaries-available"
    enabled_dir = notaries_dir / "notaries-enabled"
    enabled_targets: set[Path] = set()
    extra: list[Path] = []
    flat = is_flat_layout(notaries_dir)
    if flat:  # the 2014 layout: every bundle in the enabled folder itself, links followed
        extra = [p for p in sorted(notaries_dir.glob("*.notary")) if p.exists()]
    elif enabled_dir.is_dir():
        for p in sorted(enabled_dir.glob("*.notary")):
            if p.is_symlink():
                if p.exists():
                    enabled_targets.add(p.resolve())
            else:
                extra.append(p)
    files = sorted(avail.glob("*.notary")) if not flat and avail.is_dir() else []
    if len(files) + len(extra) > MAX_NOTARIES:
        raise ConfigError(f"more than {MAX_NOTARIES} notary bundles")
    out = []
    for p in files + extra:
        try:
            bundle = parse_bundle(p.read_bytes())
        except BundleError as e:
            raise BundleError(f"{p}: {e}") from e
        except OSError as e:
            raise ConfigError(f"cannot read {p}: {e}") from e
        out.append((bundle, p in extra or p.resolve() in enabled_targets, p))
    return out


def add_notary(
    notaries_dir: Path, data: bytes, *, enable: bool = True
) -> tuple[NotaryBundle, Path]:
    """Validate a bundle, store it in notaries-available/ (replacing one of the same name)
    and enable it. In the 2014 layout the file goes into the enabled folder itself."""
    bundle = parse_bundle(data)
    flat = is_flat_layout(notaries_dir)
    if flat and not enable:
        raise ConfigError(f"{notaries_dir} holds enabled notaries only (the 2014 layout, no "
                          "notaries-available/): a bundle cannot be added disabled there")
    avail = notaries_dir if flat else notaries_dir / "notaries-available"
    avail.mkdir(parents=True, exist_ok=True)
    existing = [p for b, _, p in list_notaries(notaries_dir) if b.name == bundle.name]
    target = (
        existing[0]
        if existing and existing[0].parent == avail
        else (avail / f"{_slug(bundle.name)}.notary")
    )
    n = 2
    while target.exists() and target not in existing:
        target = avail / f"{_slug(bundle.name)}-{n}.notary"
        n += 1
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(bundle.to_json(), indent=2) + "\n")
    os.replace(tmp, target)
    if enable and not flat:
        set_enabled(notaries_dir, bundle.name, True)
    return bundle, target


def _find(notaries_dir: Path, name: str) -> tuple[NotaryBundle, bool, Path]:
    matches = [t for t in list_notaries(notaries_dir) if name in (t[0].name, t[2].stem, t[2].name)]
    if not matches:
        raise ConfigError(f"no notary named {name!r}")
    if len(matches) > 1:
        raise ConfigError(f"{name!r} names several notaries; use the file name")
    return matches[0]


def set_enabled(notaries_dir: Path, name: str, enabled: bool) -> NotaryBundle:
    bundle, _, path = _find(notaries_dir, name)
    if is_flat_layout(notaries_dir):
        if enabled:
            return bundle  # every bundle there is enabled
        raise ConfigError(f"{notaries_dir} holds enabled notaries only (the 2014 layout): "
                          f"move {path.name} out of it to disable it")
    enabled_dir = notaries_dir / "notaries-enabled"
    enabled_dir.mkdir(parents=True, exist_ok=True)
    link = enabled_dir / path.name
    if enabled:
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path("..") / path.parent.name / path.name)
    elif link.is_symlink() or link.exists():
        link.unlink()
    return bundle


def remove_notary(notaries_dir: Path, name: str) -> NotaryBundle:
    bundle, _, path = _find(notaries_dir, name)
    link = notaries_dir / "notaries-enabled" / path.name
    if link.is_symlink() or link.exists():
        link.unlink()
    if path.exists():
        path.unlink()
    return bundle
