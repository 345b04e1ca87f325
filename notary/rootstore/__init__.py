"""Restricted-root-store mode: CA verification of presented chains against a full or top-k
root store, root popularity and coverage analysis, and the comparison with perspectives."""
