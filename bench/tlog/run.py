"""The transparency log's own costs: sequencing throughput and a large log written and verified
end to end.

    python -m bench.tlog.run [--entries 10000000] [--rate-entries 200000] [--quick]

* **Sequencing** (goal >= 10,000 entries/s on one core into SQLite): ``--rate-entries``
  realistic entries (canonical ``converge-observation/1`` JSON, ~270 bytes) queued with
  ``enqueue_many`` in chunks of 1,000, then sequenced in batches of 4,096 as the notary does
  (one fsynced transaction per batch: entries, dedupe index, tiles, signed checkpoint).
  Reported: entries/s of sequencing alone and of queue + sequence, process CPU per entry.
* **A large log** (``--entries``, 10 million by default): written the same way, then verified
  end to end from what a reader gets: every tile and entry bundle read through
  ``TileLog.read`` as ``/log/`` serves them, every entry hashed into its level-0 tile, every
  full tile hashed into the level above, and the root recomputed from the tiles and compared
  with the signed checkpoint. Reported: write and verify time, bytes on disk per entry.

Results: ``bench/results/tlog.json`` when recording (``make bench-record``), else under
``var/results/``; the machine's load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from bench.paths import results_path  # noqa: E402
from notary.core.canonical import canonical_json  # noqa: E402
from notary.tlog.log import TileLog  # noqa: E402
from notary.tlog.merkle import Frontier, leaf_hash  # noqa: E402
from notary.tlog.note import Signer, open_checkpoint  # noqa: E402
from notary.tlog.tiles import (  # noqa: E402
    ENTRIES,
    TILE_WIDTH,
    TilePath,
    decode_bundle,
    split_hashes,
    tile_root,  # noqa: E402
)

GOAL_RATE = 10_000.0
ORIGIN = "bench.test/converge-log/00000000"


def entry(i: int) -> bytes:
    h = f"{i:064x}"
    fp = ":".join(h[j : j + 2].upper() for j in range(0, 64, 2))
    return canonical_json({
        "type": "converge-observation/1", "host": f"site-{i}.example.org", "port": 443,
        "ip": None, "sha256": fp, "sha1": fp[:59], "observed_at": 1_795_000_000 + i,
    })


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def fill(log: TileLog, signer: Signer, n: int, chunk: int = 1000,
         batch: int = 4096) -> dict[str, float]:
    """Queue and sequence ``n`` entries; time the two phases separately."""
    q_wall = s_wall = q_cpu = s_cpu = 0.0
    done = 0
    while done < n:
        step = min(batch * 4, n - done)
        t0, c0 = time.perf_counter(), cpu()
        for start in range(done, done + step, chunk):
            log.enqueue_many([(f"k{i}", entry(i)) for i in range(start, min(start + chunk,
                                                                            done + step))])
        t1, c1 = time.perf_counter(), cpu()
        while log.pending():
            log.sequence(signer, max_batch=batch)
        t2, c2 = time.perf_counter(), cpu()
        q_wall += t1 - t0
        s_wall += t2 - t1
        q_cpu += c1 - c0
        s_cpu += c2 - c1
        done += step
    return {"queue_seconds": q_wall, "sequence_seconds": s_wall, "queue_cpu": q_cpu,
            "sequence_cpu": s_cpu}


def verify(log: TileLog, verifier: Any) -> dict[str, Any]:
    """Read the whole log as a reader would and check it against the signed checkpoint."""
    t0 = time.perf_counter()
    note = log.checkpoint()
    assert note is not None
    ck, _ = open_checkpoint(note, verifier)
    size = ck.size
    fr = Frontier()
    full = size // TILE_WIDTH
    level1: list[bytes] = []
    for n in range(full + (1 if size % TILE_WIDTH else 0)):
        width = TILE_WIDTH if n < full else size % TILE_WIDTH
        bundle = log.read(TilePath(ENTRIES, n, width), size)
        tile = log.read(TilePath(0, n, width), size)
        assert bundle is not None and tile is not None, f"tile {n} missing"
        hashes = [leaf_hash(e) for e in decode_bundle(bundle, width)]
        if hashes != split_hashes(tile, width):
            raise AssertionError(f"entry bundle {n} does not hash to its tile")
        for h in hashes:
            fr.append(h)
        if width == TILE_WIDTH:
            level1.append(tile_root(hashes))
    if fr.root() != ck.root:
        raise AssertionError("the entries do not hash to the checkpoint's root")
    # the level-1 tiles hold the roots of the full level-0 tiles
    for n in range(0, len(level1) // TILE_WIDTH):
        tile = log.read(TilePath(1, n, TILE_WIDTH), size)
        assert tile is not None and split_hashes(tile, TILE_WIDTH) == level1[
            n * TILE_WIDTH : (n + 1) * TILE_WIDTH], f"level-1 tile {n}"
    return {"size": size, "verify_seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=10_000_000,
                    help="entries of the large log (default 10000000)")
    ap.add_argument("--rate-entries", type=int, default=200_000,
                    help="entries of the sequencing-rate run (default 200000)")
    ap.add_argument("--quick", action="store_true", help="100k / 50k entries (a smoke run)")
    a = ap.parse_args(argv)
    if a.quick:
        a.entries, a.rate_entries = 100_000, 50_000
    signer = Signer(ORIGIN, Ed25519PrivateKey.generate())
    load_before = os.getloadavg()
    out: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_before": load_before},
        "goal_entries_per_second": GOAL_RATE,
    }
    with tempfile.TemporaryDirectory(prefix="bench-tlog-", dir=ROOT / "var") as tmp:
        log = TileLog(Path(tmp) / "rate.sqlite3", ORIGIN)
        t = fill(log, signer, a.rate_entries)
        n = a.rate_entries
        out["sequencing"] = {
            "entries": n,
            "sequence_entries_per_second": n / t["sequence_seconds"],
            "queue_and_sequence_entries_per_second": n / (t["queue_seconds"]
                                                          + t["sequence_seconds"]),
            "sequence_cpu_us_per_entry": 1e6 * t["sequence_cpu"] / n,
            "queue_cpu_us_per_entry": 1e6 * t["queue_cpu"] / n,
        }
        log.close()
        print(f"sequencing: {out['sequencing']['sequence_entries_per_second']:,.0f} entries/s "
              f"(goal {GOAL_RATE:,.0f}); with queueing "
              f"{out['sequencing']['queue_and_sequence_entries_per_second']:,.0f}/s")
        path = Path(tmp) / "large.sqlite3"
        log = TileLog(path, ORIGIN)
        t0 = time.perf_counter()
        fill(log, signer, a.entries)
        write = time.perf_counter() - t0
        v = verify(log, signer.verifier)
        log.close()
        disk = sum(p.stat().st_size for p in Path(tmp).glob("large.sqlite3*"))
        out["large_log"] = {"entries": a.entries, "write_seconds": write,
                            "verify_seconds": v["verify_seconds"],
                            "bytes_per_entry": disk / a.entries,
                            "entry_bytes": len(entry(a.entries // 2))}
        print(f"large log: {a.entries:,} entries written in {write:.0f} s, verified end to "
              f"end in {v['verify_seconds']:.0f} s, {disk / a.entries:.0f} bytes per entry on "
              f"disk ({out['large_log']['entry_bytes']} bytes of entry)")
    out["machine"]["load_after"] = os.getloadavg()
    out["met"] = out["sequencing"]["sequence_entries_per_second"] >= GOAL_RATE
    dest = results_path("bench/results/tlog.json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
