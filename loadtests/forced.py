"""Scenario: forced probes (the notary's uncached path).

Each request submits a fresh random SHA-1 fingerprint for a good target. No history can
match it, so every request makes the notary probe the target live (single-flight joins
concurrent requests for one target) and answer 409 with the fingerprint it really sees,
signed. Throughput here is bounded by the targets' TLS handshake rate and ``--max-probes``;
expect 503 + ``Retry-After`` (reported as failures) when the probe capacity is full.

    locust -f loadtests/forced.py --config loadtests/locust.conf \\
        --host http://127.0.0.1:8443 --notary-cert DATA/notary.pem --targets farm/targets.csv
"""

from __future__ import annotations

import random

from locust import FastHttpUser, constant, task
from notary_load import post_validated, random_sha1, targets


class ForcedProbeUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.pool = targets(self.environment)
        self.rng = random.Random()

    @task
    def validate_forced(self) -> None:
        t = self.rng.choice(self.pool)
        post_validated(self, t, random_sha1(self.rng), "forced")
