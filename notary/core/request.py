"""The legacy request body: ``fingerprint=<FP>`` form-encoded (colons may be unescaped)."""

from __future__ import annotations

from urllib.parse import parse_qsl

from notary.core.fingerprint import Fingerprint, parse_fingerprint
from notary.errors import BadInput, MissingFingerprint

MAX_FIELDS = 8


def parse_form_fingerprint(body: bytes) -> Fingerprint:
    """The fingerprint of a POST body; raises :class:`BadInput` subclasses with clear text."""
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadInput("request body must be ASCII form data") from exc
    try:
        pairs = parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FIELDS)
    except ValueError as exc:
        raise BadInput(f"request body has more than {MAX_FIELDS} form fields") from exc
    values = [v for k, v in pairs if k == "fingerprint"]
    if not values or not values[0].strip():
        raise MissingFingerprint("You must specify a fingerprint.")
    if len(values) > 1:
        raise BadInput("request body has more than one fingerprint")
    return parse_fingerprint(values[0])


__all__ = ["parse_form_fingerprint"]
