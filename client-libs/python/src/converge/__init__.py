"""converge: validate TLS certificates with Convergence notaries.

``converge(host, port, fingerprint)`` returns a :class:`Verdict` (truthy when trusted);
``aconverge`` is the asynchronous form; :mod:`converge.tls` plugs the check into ``ssl``,
``http.client``/``urllib``, ``requests``/``urllib3``, ``httpx`` and ``aiohttp``.
"""

from .bundle import NotaryBundle, NotaryHost, parse_bundle
from .client import Client, Verdict, aconverge, close_clients, converge, get_client
from .config import Config, discover_config_dir, load_config
from .errors import (
    BadInput,
    BundleError,
    CacheIOError,
    ConfigError,
    ConvergeError,
    FingerprintError,
    IOFailure,
    NotaryUnreachable,
    NotTrusted,
    PinMismatch,
    ResponseError,
    SignatureError,
    TargetError,
    TargetIOError,
)
from .fingerprint import Fingerprint, fingerprint_of, parse_fingerprint
from .notary_io import NotaryResult
from .policy import Policy, decide, settled

__version__ = "0.1.0"

__all__ = [
    "BadInput",
    "BundleError",
    "CacheIOError",
    "Client",
    "Config",
    "ConfigError",
    "ConvergeError",
    "Fingerprint",
    "FingerprintError",
    "IOFailure",
    "NotTrusted",
    "NotaryBundle",
    "NotaryHost",
    "NotaryResult",
    "NotaryUnreachable",
    "PinMismatch",
    "Policy",
    "ResponseError",
    "SignatureError",
    "TargetError",
    "TargetIOError",
    "Verdict",
    "aconverge",
    "converge",
    "decide",
    "discover_config_dir",
    "fingerprint_of",
    "close_clients",
    "get_client",
    "load_config",
    "parse_bundle",
    "parse_fingerprint",
    "settled",
]
