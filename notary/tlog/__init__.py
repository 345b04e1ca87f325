"""The notary's transparency log: every observation it commits to, in a public append-only
Merkle log in the C2SP formats (tlog-tiles, tlog-checkpoint, signed-note, tlog-witness).

``merkle``, ``note``, ``tiles`` and ``entry`` are pure; ``log`` keeps the log in SQLite.
"""
