"""``replay reproduce``: the whole reproduction in one command.

synth -> farm -> notary (``--verifier both``) -> workload -> open-loop run -> report, then
the restricted-root-store comparison on the replay notary's own observations (weighted by
the replay's requests), the root-store worlds (the thesis's popularity and models that are
not the thesis's), the client cost of Table 4 and the thesis's HTTPS overhead over emulated
paths (``replay overhead --quick``); every table of the study and the thesis
side by side at the end, in the terminal and in ``OUT/reproduce.md``.

Long steps show a progress bar with an ETA on stderr. Ctrl-C stops cleanly: the servers are
stopped, what is done stays on disk, and the summary says which steps ran.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from replay.errors import ReplayInputError, ReplayIOError
from replay.services import (
    Progress,
    Services,
    bin_path,
    free_port,
    http_ready,
    ports,
    quick,
    run,
    tcp_ready,
    watch,
)
from replay.sidebyside import INPUT, MEASURED, MODEL, Row, Table, markdown, pct, text

ROOT = Path(__file__).resolve().parents[1]
WORLD_MODELS = ("thesis", "zipf:0.8", "zipf:1.2", "uniform")
# Table 4 of the study: client cost, 3 notaries in the US ("continental"), 8 worldwide
STUDY_TABLE4 = {"local": 108, "hit_continental": 743, "hit_global": 1006,
                "miss_continental": 1508, "miss_global": 1790}


@dataclass(frozen=True)
class ReproduceConfig:
    out: Path
    scale: float = 0.02
    duration: float = 600.0
    speed: float = 2.0
    seed: int = 1
    world_sites: int = 1500
    worlds: tuple[str, ...] = WORLD_MODELS
    client_bench: bool = True
    overhead: bool = True  # the thesis's HTTPS overhead (replay overhead --quick)
    overhead_args: tuple[str, ...] = ()  # more `replay overhead` options (tests: a smaller run)
    timeout: float = 10.0  # per replayed request

    def validate(self) -> None:
        if not 0 < self.scale <= 2:
            raise ReplayInputError("--scale must be in (0, 2]")
        if not 10 <= self.duration <= 3600:
            raise ReplayInputError("--duration must be in [10, 3600] seconds")
        if not 0.1 <= self.speed <= 50:
            raise ReplayInputError("--speed must be in [0.1, 50]")
        if not 50 <= self.world_sites <= 20_000:
            raise ReplayInputError("--world-sites must be in [50, 20000]")


# ------------------------------------------------------------------ steps


@dataclass
class State:
    cfg: ReproduceConfig
    services: Services
    done: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    notary_url: str = ""


def _step_synth(st: State) -> None:
    from replay.synth import SynthConfig, SyntheticTrace, write_synthetic

    cfg = st.cfg
    trace = SyntheticTrace(SynthConfig(seed=cfg.seed, scale=cfg.scale, duration=cfg.duration))
    p = Progress("synth (trace time)", cfg.duration, " s")
    watch(p, lambda: trace.summary.reached,
           lambda: write_synthetic(trace, cfg.out / "syn", ["canonical"]))
    p.finish(f"{trace.summary.flows:,} flows")


def _step_farm_and_notary(st: State) -> None:
    cfg, out = st.cfg, st.cfg.out
    port = ports(5)
    r = bin_path("replay")
    farm = [r, "farm", "--spec", str(out / "syn" / "farm-spec.json"), "--state",
            str(out / "farm"), "--port", str(port[0]), "--slow-port", str(port[1]),
            "--dead-port", str(port[2]), "--silent-port", str(port[3])]
    quick("farm certificates", lambda: run([*farm, "--prepare-only"],
                                           out / "farm-prepare.log"))
    (out / "farm" / "ready").unlink(missing_ok=True)
    st.services.start("farm", [*farm, "--duration", str(cfg.duration / cfg.speed + 900)])
    st.services.wait_until("farm", lambda: (out / "farm" / "ready").exists())
    st.notary_url = f"http://127.0.0.1:{port[4]}"
    st.services.start("notary", [
        bin_path("notary"), "serve", "--no-tls", "--data-dir", str(out / "notary"), "--listen",
        f"127.0.0.1:{port[4]}", "--allow-target", "127.0.0.0/8", "--hosts-file",
        str(out / "farm" / "hosts"), "--verifier", "both", "--ca-roots",
        str(out / "farm" / "roots.pem"), "--ca-no-mozilla", "--rate-limit", "0",
        "--probe-rate-limit", "0"])
    st.services.wait_until("notary", lambda: http_ready(st.notary_url + "/"))


def _step_workload(st: State) -> None:
    from replay import columnar
    from replay.ingest import ErrorLog

    out = st.cfg.out
    total = json.loads((out / "syn" / "synth.json").read_text())["summary"]["flows"]
    errors = ErrorLog()
    p = Progress("workload (flows)", total)
    read = [0]

    def work() -> tuple[Any, int, Path]:
        progress = columnar.Progress(total, None, on_rows=lambda n: read.__setitem__(0, n))
        return columnar.make_workload(
            [out / "syn" / "flows.csv"], out / "wl.csv",
            columnar.EngineConfig(jobs=os.cpu_count() or 1), errors,
            names=out / "syn" / "names.txt", targets=out / "farm" / "targets.csv",
            info={"trace_seconds": st.cfg.duration}, progress=progress)

    counters, rows, _ = watch(p, lambda: read[0], work)
    p.finish(f"{rows:,} events, {counters.notary_requests:,} notary requests")


def _step_run(st: State) -> None:
    cfg, out = st.cfg, st.cfg.out
    span = cfg.duration / cfg.speed
    argv = [bin_path("replay"), "run", str(out / "wl.csv"), "--notary", st.notary_url, "-o",
            str(out / "results.csv"), "--speed", str(cfg.speed), "--timeout", str(cfg.timeout),
            "--quiet"]
    proc = st.services.start("replay-run", argv)
    p = Progress(f"replay at x{cfg.speed:g}", span, " s")
    t0 = time.monotonic()
    while proc.poll() is None:
        p.update(min(span, time.monotonic() - t0))
        time.sleep(0.5)
    st.services.procs = [(n, q) for n, q in st.services.procs if q is not proc]
    if proc.returncode != 0:
        log = (out / "replay-run.log").read_text(errors="replace")[-1500:]
        raise ReplayIOError(f"replay run failed ({proc.returncode}):\n{log}")
    p.finish()


def _step_report(st: State) -> None:
    from replay.report import build_report
    from replay.workload import read_stages

    out = st.cfg.out
    synth = json.loads((out / "syn" / "synth.json").read_text())
    st.report = quick("report", lambda: build_report(
        out / "results.csv", out / "report", read_stages(out / "wl.csv.stages.json"),
        synth=synth))
    for t in st.report["tables"]:
        st.tables.append(Table(t["title"], tuple(Row(*r) for r in t["rows"]),
                               footnote=t.get("footnote", "")))


def _step_compare(st: State) -> None:
    """CA trust vs perspectives on the replay notary's own observations."""
    from replay.rootstore.view import client_view

    out = st.cfg.out
    view, _ = client_view(out / "farm")
    (out / "client-view.jsonl").write_text("".join(json.dumps(v) + "\n" for v in view))
    printed = quick("root store: compare", lambda: run([
        bin_path("replay"), "rootstore", "compare", "--db", str(out / "notary" / "notary.sqlite3"),
        "--client-view", str(out / "client-view.jsonl"), "--roots",
        str(out / "farm" / "roots.pem"), "--no-mozilla", "--k", "1,3,5,10", "--detail-k", "5",
        "--requests", str(out / "report" / "per-site.csv"), "--out", str(out / "compare")],
        out / "compare.log"))
    doc = json.loads((out / "compare" / "comparison.json").read_text())
    sc = doc.get("scores")
    if sc:
        rows = []
        for counted in ("sites", "requests"):
            for name, v in (sc.get(counted) or {}).items():
                rows.append(Row(f"{name}, per {counted[:-1]}",
                                f"catches {v['catches']:,}, misses {v['misses']:,}, "
                                f"false alarms {v['false_alarms']:,}", "-", "-", MODEL,
                                ""))
        st.tables.append(Table(
            "CA trust vs perspectives on the replay's sites (the replay notary's own "
            "observations, --verifier both)", tuple(rows), paper_label="thesis",
            footnote=f"{sc['labelled']} sites the replay validated, labelled by the farm's "
            "roles: attack = clients "
            "shown a forged certificate (under the most popular root, under the least popular "
            "one, under an untrusted root, or with the attacker on the notary's path too); "
            "genuine = the rest (rotating certificates and misconfigured sites included). "
            "Weighted by the replay's notary requests; perspectives per request by the "
            "notary's own answer. The attack and misconfiguration shares are inputs."))
    (out / "compare.txt").write_text(printed)


def _world_row(st: State, model: str, now: dt.datetime, tick: Callable[[], None]) -> Row:
    """Build one synthetic world, serve it, scan it with ``replay rootstore scan``, analyse it."""
    from replay.rootstore.world import RootWorld

    cfg, out = st.cfg, st.cfg.out
    slug = model.replace(":", "-")
    wdir = out / "worlds" / slug
    logs = out / "worlds"
    # 40 roots: with Table 3's nine counts and the geometric tail that many roots hold the
    # thesis's 97,415 sites in its proportions (replay/rootstore/world.py)
    world = RootWorld.build(wdir, now, sites=cfg.world_sites, roots=40, seed=cfg.seed,
                            popularity=model)
    tick()
    port = free_port()
    name = f"world-{slug}"
    proc = st.services.start(name, [bin_path("replay"), "rootstore", "serve", str(wdir),
                                    "--port", str(port), "--seconds", "900"])
    try:
        st.services.wait_until(name, lambda: tcp_ready(port))
        hosts = logs / f"{slug}.hosts"
        hosts.write_text("".join(f"{h}:{port}\n" for h in world.hosts()))
        run([bin_path("replay"), "rootstore", "scan", "--hosts", str(hosts), "--hosts-file",
              str(wdir / "hosts"), "--concurrency", "32", "--timeout", "5", "-o",
              str(wdir / "scan.jsonl")], logs / f"{slug}-scan.log")
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        st.services.procs = [(n, q) for n, q in st.services.procs if q is not proc]
    tick()
    run([bin_path("replay"), "rootstore", "analyze", "--chains", str(wdir / "scan.jsonl"),
          "--roots", str(wdir / "roots.pem"), "--no-mozilla", "--world",
          str(wdir / "world.json"), "--out", str(wdir / "analysis")],
         logs / f"{slug}-analyze.log")
    tick()
    cov = json.loads((wdir / "analysis" / "summary.json").read_text())["coverage"]
    thesis = model == "thesis"
    return Row(f"{model} popularity: top-1 / top-5 / top-10 roots",
               " / ".join(pct(cov[f"top_{k}"]) for k in (1, 5, 10)), "20% / 59% / ~80%",
               "circular" if thesis else "yes", INPUT if thesis else MEASURED,
               "the world's root popularity is the thesis's Table 3: the curve returns its "
               "input" if thesis else f"a {model} world: what the analysis measures when the "
               "popularity is not the thesis's")


def _step_worlds(st: State) -> None:
    models = st.cfg.worlds
    p = Progress("root-store worlds", len(models) * 3, " steps")
    done = [0]

    def tick() -> None:
        done[0] += 1
        p.update(done[0])

    now = dt.datetime.now(dt.UTC)
    rows = [_world_row(st, model, now, tick) for model in models]
    p.finish()
    st.tables.append(Table("Thesis Figure 17: coverage of valid sites by the top-k roots",
                           tuple(rows), paper_label="thesis",
                           footnote="Synthetic worlds served over TLS on loopback and scanned "
                           "with replay rootstore scan; with real data, scan your own host list "
                           "(replay rootstore scan, docs/rootstore.md)."))


def _step_client_cost(st: State) -> None:
    out = st.cfg.out
    bench = ROOT / "bench" / "client" / "bench_client.py"
    if not bench.exists():
        st.tables.append(Table("Table 4: client cost", (), footnote=f"skipped: {bench} is not "
                               "in this installation (run from a checkout)"))
        return
    quick("client cost (Table 4)", lambda: run(
        [sys.executable, str(bench), "--quick", "--out", str(out / "client-cost.json")],
        out / "client.log", timeout=900))
    doc = json.loads((out / "client-cost.json").read_text())
    c, n = doc["cache"], doc.get("notary_round_trip", {})

    def ms(d: dict[str, Any] | None) -> str:
        return "-" if not d else f"{d['p50_us'] / 1000:.2f} ms (p50)"

    loop = "ours: client, notaries and site on one loopback host, no WAN round trips"
    rows = [
        Row("local cache hit", ms(c.get("client_check")), f"{STUDY_TABLE4['local']} ms", "no",
            MEASURED, "ours keeps the cache database open; the study's client reopened it "
            f"for every check: that way here {ms(c.get('baseline_reopen_per_validation'))}"),
        Row("notary cache hit, 3 notaries (continental)",
            ms(n.get("converge_three_notaries_wait_all")),
            f"{STUDY_TABLE4['hit_continental']} ms", "no", MEASURED, loop),
        Row("notary cache miss, 3 notaries (continental)",
            ms(n.get("converge_three_notaries_miss")),
            f"{STUDY_TABLE4['miss_continental']} ms", "no", MEASURED,
            loop + "; each notary probes a loopback site"),
        Row("notary cache hit / miss, 8 notaries (global)", "-",
            f"{STUDY_TABLE4['hit_global']} / {STUDY_TABLE4['miss_global']} ms", "-", "-",
            "not measured: one machine has no global network paths"),
    ]
    st.tables.append(Table("Table 4: client cost of one validation", tuple(rows)))


def _step_overhead(st: State) -> None:
    """The thesis's HTTPS overhead over emulated paths (``replay overhead --quick``)."""
    out = st.cfg.out
    quick("https overhead (thesis)", lambda: run(
        [bin_path("replay"), "overhead", "--quick", "--out", str(out / "overhead"), "--seed",
         str(st.cfg.seed), *st.cfg.overhead_args], out / "overhead.log", timeout=900))
    doc = json.loads((out / "overhead" / "overhead.json").read_text())
    for t in doc["tables"]:
        st.tables.append(Table(t["title"], tuple(Row(*r) for r in t["rows"]),
                               paper_label="thesis", footnote=t.get("footnote", "")))


STEPS: tuple[tuple[str, Callable[[State], None]], ...] = (
    ("synth", _step_synth),
    ("farm and notary", _step_farm_and_notary),
    ("workload", _step_workload),
    ("run", _step_run),
    ("report", _step_report),
    ("root store: comparison", _step_compare),
    ("root store: worlds", _step_worlds),
    ("client cost", _step_client_cost),
    ("https overhead", _step_overhead),
)


def _summary(st: State, stopped: str | None) -> str:
    cfg = st.cfg
    head = (f"replay reproduce: scale {cfg.scale}, {cfg.duration:g} s of trace, speed "
            f"x{cfg.speed:g}, seed {cfg.seed}; steps done: {', '.join(st.done) or 'none'}"
            + (f"; stopped during {stopped}" if stopped else ""))
    return head + "\n\n" + "\n\n".join(text(t) for t in st.tables)


def reproduce(cfg: ReproduceConfig, stream: TextIO | None = None) -> int:
    """Run every step; 0 when all ran, 130 when interrupted (Ctrl-C / SIGTERM)."""
    cfg.validate()
    out = cfg.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplayIOError(f"cannot create {out}: {exc}") from exc
    stream = stream or sys.stdout
    st = State(cfg, Services(out))
    stopped: str | None = None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for name, step in STEPS:
            if name == "root store: worlds" and not cfg.worlds:
                continue
            if name == "client cost" and not cfg.client_bench:
                continue
            if name == "https overhead" and not cfg.overhead:
                continue
            stopped = name
            step(st)
            if name == "run":
                # the farm and the notary are done; the comparison reads the notary's
                # database, complete once the notary has stopped
                st.services.stop()
            st.done.append(name)
            stopped = None
    except KeyboardInterrupt:
        sys.stderr.write(f"\ninterrupted during {stopped}: stopping; what is done is kept in "
                         f"{out}\n")
    finally:
        st.services.stop()
        signal.signal(signal.SIGTERM, previous)
    summary = _summary(st, stopped)
    (out / "reproduce.md").write_text(
        f"# Reproduction\n\n{summary.splitlines()[0]}\n\n"
        + "\n\n".join(markdown(t) for t in st.tables) + "\n", encoding="utf-8")
    (out / "reproduce.json").write_text(json.dumps({
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in cfg.__dict__.items()},
        "done": st.done, "stopped": stopped,
        "tables": [{"title": t.title, "rows": [r.cells() for r in t.rows],
                    "footnote": t.footnote} for t in st.tables]}, indent=2) + "\n")
    stream.write(summary + "\n")
    stream.write(f"\nwritten: {out / 'reproduce.md'}, {out / 'report' / 'report.md'}\n")
    return 130 if stopped else 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


__all__ = ["STEPS", "Progress", "ReproduceConfig", "reproduce"]
