"""Fuzz every parser in ``fuzz_targets.PARSERS`` for a bounded time.

    python fuzz/run.py --seconds 20            # all targets, time split between them
    python fuzz/run.py --seconds 300 --target "notary extended request"

With atheris installed (``pip install atheris``) the targets run under libFuzzer with
coverage feedback from instrumented notary, client and replay modules, in one child process
(libFuzzer ends its process): the first input byte picks the target, so coverage guides the
choice too. With ``--target`` the child fuzzes only those. Without atheris a seeded random
mutator runs instead, splitting the time between the targets.
Exit status 0: no crash; 1: a target raised outside its error family (the input is printed
and, under atheris, saved as ``crash-*`` in the working directory).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fuzz_seeds import SEEDS  # noqa: E402
from fuzz_targets import KNOWN_OPEN, PARSERS, run  # noqa: E402

INSTRUMENTED = ["notary.core", "notary.relay", "notary.resolve", "notary.config",
                "notary.ca.verify", "notary.ca.der",
                "converge.legacy", "converge.bundle", "converge.config", "replay.flows",
                "replay.ingest"]


def _atheris_child(
    names: list[str], seconds: int, corpus: Path | None, runs: int = 0, seed: int = 0
) -> int:
    import atheris

    with atheris.instrument_imports():
        import importlib

        for mod in INSTRUMENTED:
            importlib.import_module(mod)

    def one(data: bytes) -> None:
        if not data:
            return
        run(names[data[0] % len(names)], data[1:], tolerate_known=True)

    argv = [sys.argv[0], f"-max_total_time={seconds}", "-max_len=4096", "-rss_limit_mb=1024",
            "-timeout=5", "-print_final_stats=0"]
    if runs > 0:  # with a fixed seed too, the same inputs every time (a reproducible run)
        argv.append(f"-runs={runs}")
    if seed > 0:
        argv.append(f"-seed={seed}")
    with tempfile.TemporaryDirectory() as seed_dir:
        if corpus is None:  # start from the seeds, each prefixed by its target's byte
            corpus = Path(seed_dir)
            for i, name in enumerate(names):
                for j, seed in enumerate(SEEDS[PARSERS[name][2]]):
                    (corpus / f"{i}-{j}").write_bytes(bytes([i]) + seed)
        argv.append(str(corpus))
        atheris.Setup(argv, one)
        atheris.Fuzz()
    return 0


def _mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.randint(0, 3)
        pos = rng.randint(0, len(buf))
        if op == 0 and pos < len(buf):
            buf[pos] = rng.randint(0, 255)
        elif op == 1:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 2:
            del buf[pos : pos + rng.randint(1, 32)]
        else:
            buf[pos:pos] = rng.choice(pool)[: rng.randint(1, 64)]
    return bytes(buf[:4096])


def _random_child(name: str, seconds: float, seed: int) -> int:
    rng = random.Random(seed)
    pool = SEEDS[PARSERS[name][2]]
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        data = _mutate(rng, rng.choice(pool), pool)
        try:
            run(name, data, tolerate_known=True)
        except BaseException:
            print(f"crash in {name!r} on input {data!r}", file=sys.stderr)
            raise
        n += 1
    print(f"{name}: {n} inputs, no crash", file=sys.stderr)
    return 0


def have_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="total time (default 20)")
    ap.add_argument("--target", action="append", choices=sorted(PARSERS), metavar="NAME",
                    help="fuzz only this target (repeatable)")
    ap.add_argument("--engine", choices=["auto", "atheris", "random"], default="auto")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0,
                    help="fixed seed (default 0: a new random one each run)")
    ap.add_argument("--runs", type=int, default=0,
                    help="stop after this many inputs (with --seed: a reproducible run)")
    args = ap.parse_args(argv)
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if have_atheris() else "random"
    names = args.target or sorted(PARSERS)
    if KNOWN_OPEN and not args.child:
        print(f"tolerating known open bugs in: {', '.join(sorted(KNOWN_OPEN))}")
    if args.child:
        if engine == "atheris":
            return _atheris_child(names, max(1, int(args.seconds)), None, args.runs, args.seed)
        return _random_child(args.child, args.seconds, args.seed)
    if engine == "atheris":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "all", "--seconds",
               str(args.seconds), "--engine", "atheris", "--runs", str(args.runs),
               "--seed", str(args.seed)]
        for name in names:
            cmd += ["--target", name]
        env = {**os.environ, "PYTHONHASHSEED": "0"} if args.seed else None
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.seconds + 120,
                              env=env)
        runs = [line for line in proc.stderr.splitlines() if line.startswith("Done ")]
        print(f"atheris {len(names)} targets, {args.seconds:g} s: "
              + ("ok" if proc.returncode == 0 else f"CRASH (exit {proc.returncode})")
              + (f"; {runs[-1]}" if runs else ""))
        if proc.returncode != 0:
            both = (proc.stdout + proc.stderr).splitlines()
            lines = [ln for ln in both if not ln.startswith("INFO: Instr")]
            sys.stderr.write("\n".join(lines[-80:]) + "\n")
        return 0 if proc.returncode == 0 else 1
    share = max(1.0, args.seconds / len(names))
    failed = []
    for name in names:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--seconds",
               str(share), "--engine", engine, "--seed", str(args.seed)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=share + 60)
        status = "ok" if proc.returncode == 0 else f"CRASH (exit {proc.returncode})"
        print(f"{engine} {name}: {status}", flush=True)
        if proc.returncode != 0:
            failed.append(name)
            sys.stderr.write(proc.stderr[-4000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
