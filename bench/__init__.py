"""Benchmarks: long measurements that print figures and ratios against a baseline measured
in the same run, and write their results to ``bench/results/`` (``make bench``)."""
