"""Scenario: cached validations (the notary's hot path).

Each user repeatedly asks about a small hot set of good targets (the first 50 ``good`` rows of
``--targets``) with the fingerprint the farm serves. After the first probe of each target
every answer comes from the notary's cache: a pre-signed body, no probe, no signing.
Responses are validated (signature under the pinned certificate, fingerprint listed).

    locust -f loadtests/cached.py --config loadtests/locust.conf \\
        --host http://127.0.0.1:8443 --notary-cert DATA/notary.pem --targets farm/targets.csv
"""

from __future__ import annotations

import random

from locust import FastHttpUser, constant, task
from notary_load import post_validated, targets

HOT_SET = 50


class CachedUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.hot = targets(self.environment)[:HOT_SET]
        self.rng = random.Random()

    @task
    def validate_cached(self) -> None:
        t = self.rng.choice(self.hot)
        post_validated(self, t, t.fingerprint, "cached")
