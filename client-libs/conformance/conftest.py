"""Fixtures of the conformance runner (defined in conformance_env)."""

from conformance_env import env

__all__ = ["env"]
