"""Fixtures of the client's test suite (defined in converge_fixtures)."""

from converge_fixtures import ca, notaries, other_ca, pki, target

__all__ = ["ca", "notaries", "other_ca", "pki", "target"]
