"""Scenario: the 2014 study's mix, as the notary sees it.

The study (IMC 2014) found 77% of validations answered from the client's own cache, 21%
from the notary's cache and about 1% needing a live probe. Client-cache hits never reach a
notary, so the notary's share is 21 cached answers to 1 probe (95.5% / 4.5%): task weights
21 and 1. Cached requests go to the hot set of ``--targets``; probe requests use a fresh
random fingerprint (as in ``forced.py``) so each one really probes.

    locust -f loadtests/study_mix.py --config loadtests/locust.conf \\
        --host http://127.0.0.1:8443 --notary-cert DATA/notary.pem --targets farm/targets.csv
"""

from __future__ import annotations

import random

from locust import FastHttpUser, constant, task
from notary_load import post_validated, random_sha1, targets

HOT_SET = 50


class StudyMixUser(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.pool = targets(self.environment)
        self.hot = self.pool[:HOT_SET]
        self.rng = random.Random()

    @task(21)
    def notary_cache_hit(self) -> None:
        t = self.rng.choice(self.hot)
        post_validated(self, t, t.fingerprint, "mix-cached")

    @task(1)
    def live_probe(self) -> None:
        t = self.rng.choice(self.pool)
        post_validated(self, t, random_sha1(self.rng), "mix-probe")
