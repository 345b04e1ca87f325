"""docker-compose.yml, the Dockerfile and deploy/ checked for structure and wiring.

Docker cannot run here, so :func:`problems` reads the files and lists everything that would
break the deployment: missing services, notaries not sharing one Redis, health checks on the
wrong port, a load balancer that misses a notary, Prometheus missing a worker, locust workers
not pointed at the master. The notaries' commands are parsed by the notary's own CLI parser,
so a misspelt flag fails here. Each rule has a must-fail twin: a mutated copy of the real
files that the check rejects.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml
from scale_helpers import ROOT

from notary.cli import _parser, settings_from_args
from notary.config import parse_listen
from notary.errors import BadInput

Doc = dict[str, Any]


def load() -> tuple[Doc, str, Doc, str]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    haproxy = (ROOT / "deploy" / "haproxy.cfg").read_text()
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    dockerfile = (ROOT / "Dockerfile").read_text()
    return compose, haproxy, prom, dockerfile


DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "converge-notary.json"
# the panels an operator watches, each with a metric it must query
WATCHED = {
    "Requests per second by status": "notary_requests_total",
    "Notary cache hit ratio": "notary_cache_total",
    "Live probe latency": "notary_probe_seconds_bucket",
    "Probe slots in use": "notary_probes_in_flight",
    "Refused by the address policy": 'status="403"',
    "Rate-limited": "notary_rate_limited_total",
}


def _exported_metrics() -> set[str]:
    """Every sample name the notary exposes (families with their _total/_bucket/... forms)."""
    from notary.metrics import Metrics

    text = Metrics().exposition().decode()
    names = {ln.split("{")[0].split()[0] for ln in text.splitlines() if ln and ln[0] != "#"}
    return names | {"notary_workers", "notary_metrics_workers_unreachable",
                    "notary_probe_seconds_bucket", "notary_probe_seconds_count"}


def dashboard_problems(dashboard: Doc) -> list[str]:
    out = []
    panels = {p.get("title", ""): p for p in dashboard.get("panels", [])}
    for title, needle in WATCHED.items():
        hit = [p for t, p in panels.items() if t.startswith(title)]
        if not hit:
            out.append(f"dashboard lacks the panel {title!r}")
        elif not any(needle in t.get("expr", "") for t in hit[0].get("targets", [])):
            out.append(f"dashboard panel {title!r} does not query {needle}")
    known = _exported_metrics()
    for p in dashboard.get("panels", []):
        for t in p.get("targets", []):
            for name in re.findall(r"\b(notary_[a-z_]+)", t.get("expr", "")):
                if name not in known:
                    out.append(f"dashboard panel {p.get('title')!r} queries unknown {name}")
    return out


def _flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def notaries(compose: Doc) -> dict[str, Doc]:
    return {n: s for n, s in compose["services"].items()
            if isinstance(s.get("command"), list) and s["command"][:1] == ["serve"]}


def problems(compose: Doc, haproxy: str, prom: Doc, dockerfile: str) -> list[str]:
    out: list[str] = []
    services: dict[str, Doc] = compose.get("services", {})
    volumes = set(compose.get("volumes", {}) or {})
    for need in ("redis", "farm", "lb", "keys", "locust-master", "locust-worker"):
        if need not in services:
            out.append(f"service {need} missing")
    nots = notaries(compose)
    if len(nots) < 2:
        out.append(f"need two or more notaries, found {sorted(nots)}")

    # every named volume a service mounts is declared
    for name, svc in services.items():
        for vol in svc.get("volumes", []) or []:
            src = str(vol).split(":", 1)[0]
            if not src.startswith((".", "/")) and src not in volumes:
                out.append(f"{name}: volume {src} is not declared")

    # redis: health-checked; every notary uses it, with one URL
    redis = services.get("redis", {})
    if "healthcheck" not in redis:
        out.append("redis has no health check")
    urls = {n: _flag(s["command"], "--redis") for n, s in nots.items()}
    if len(set(urls.values())) != 1 or None in urls.values():
        out.append(f"notaries do not share one Redis URL: {urls}")
    for n, url in urls.items():
        if url and not re.fullmatch(r"redis://redis:6379/\d+", url):
            out.append(f"{n}: Redis URL {url} does not name the redis service")

    # notaries: commands parse with the real CLI; keys shared and mounted read-only
    listen: dict[str, tuple[str, int, int, int]] = {}  # name -> (host, port, metrics, workers)
    for n, s in nots.items():
        try:
            args = _parser().parse_args(s["command"])
            settings = settings_from_args(args)
        except (SystemExit, BadInput) as exc:
            out.append(f"{n}: the notary CLI rejects its command ({exc})")
            continue
        if settings.metrics_listen is None:
            out.append(f"{n}: no --metrics-listen, so no health check or metrics")
            continue
        host, port = settings.listen_addrs()[0]
        listen[n] = (host, port, parse_listen(settings.metrics_listen)[1], settings.workers)
        if str(settings.key_path).split("/")[1:2] != ["keys"]:
            out.append(f"{n}: key is not on the shared keys volume")
        if not any(str(v).startswith("keys:/keys") and str(v).endswith(":ro")
                   for v in s.get("volumes", [])):
            out.append(f"{n}: keys volume not mounted read-only")
        hc = " ".join(s.get("healthcheck", {}).get("test", []))
        if f":{listen[n][2]}/readyz" not in hc:
            out.append(f"{n}: health check does not ask /readyz on its metrics port")
        deps = s.get("depends_on", {})
        if "redis" not in deps or "keys" not in deps:
            out.append(f"{n}: does not wait for redis and keys")
    ports = [p for v in listen.values() for p in [v[1], v[2]]]
    if len(ports) != len(set(ports)):
        out.append(f"notaries share a network namespace but their ports collide: {ports}")

    # the load balancer: mounts its config, names every notary with a readiness check
    lb = services.get("lb", {})
    if not any("deploy/haproxy.cfg" in str(v) for v in lb.get("volumes", [])):
        out.append("lb does not mount deploy/haproxy.cfg")
    servers = re.findall(r"^\s*server\s+(\S+)\s+(\S+):(\d+)(.*)$", haproxy, re.M)
    for n, (_, port, mport, _) in listen.items():
        reach = nots[n].get("network_mode", "").removeprefix("service:") or n
        hits = [s for s in servers if s[1] == reach and int(s[2]) == port]
        if not hits:
            out.append(f"haproxy does not name {n} ({reach}:{port})")
        elif f"check port {mport}" not in hits[0][3]:
            out.append(f"haproxy does not health-check {n} on {mport}")
    if "option httpchk GET /readyz" not in haproxy:
        out.append("haproxy does not check /readyz")
    binds = {int(b) for b in re.findall(r"^\s*bind\s+\S*:(\d+)", haproxy, re.M)}
    published = {int(str(p).rsplit(":", 1)[1]) for p in lb.get("ports", [])}
    if not published or not published <= binds:
        out.append(f"lb publishes {published} but haproxy binds {binds}")

    # Prometheus scrapes every notary once: its port serves the merged metrics of its workers
    targets = [t for job in prom.get("scrape_configs", []) for sc in job["static_configs"]
               for t in sc["targets"]]
    for n, (_, _, mport, _) in listen.items():
        reach = nots[n].get("network_mode", "").removeprefix("service:") or n
        if targets.count(f"{reach}:{mport}") != 1:
            out.append(f"prometheus does not scrape {n} exactly once ({reach}:{mport})")

    # Grafana: in the monitoring profile, provisioned datasource and the operator's dashboard
    grafana = services.get("grafana", {})
    if grafana.get("profiles") != ["monitoring"]:
        out.append("grafana is not in the monitoring profile")
    mounts = " ".join(str(v) for v in grafana.get("volumes", []))
    for part in ("deploy/grafana/provisioning", "deploy/grafana/dashboards"):
        if part not in mounts:
            out.append(f"grafana does not mount {part}")
    out.extend(dashboard_problems(json.loads(DASHBOARD.read_text())))

    # locust: master and workers in a profile, workers find the master, files exist
    master, worker = services.get("locust-master", {}), services.get("locust-worker", {})
    mcmd, wcmd = master.get("command", []), worker.get("command", [])
    if "--master" not in mcmd or "--worker" not in wcmd:
        out.append("locust master/worker roles are not set")
    if _flag(wcmd, "--master-host") != "locust-master":
        out.append("locust workers do not point at locust-master")
    if worker.get("deploy", {}).get("replicas", 1) < 2:
        out.append("fewer than two locust workers")
    if not (master.get("profiles") and master.get("profiles") == worker.get("profiles")):
        out.append("locust services are not in one optional profile")
    for cmd in (mcmd, wcmd):
        f = _flag(cmd, "-f")
        if f is None or not (ROOT / f.removeprefix("/app/")).is_file():
            out.append(f"locustfile {f} does not exist in the repository")
    if _flag(mcmd, "--expect-workers") != str(worker.get("deploy", {}).get("replicas", 1)):
        out.append("master does not expect the number of workers started")

    # Dockerfile: both targets, the notary entry point, the ports compose uses
    for stage in ("AS notary", "AS locust"):
        if stage not in dockerfile:
            out.append(f"Dockerfile lacks stage {stage}")
    if 'ENTRYPOINT ["notary"]' not in dockerfile or "EXPOSE 8443" not in dockerfile:
        out.append("Dockerfile does not run the notary on 8443")
    for n in nots:
        if nots[n].get("build", {}).get("target") != "notary":
            out.append(f"{n} is not built from the notary stage")
    return out


def test_the_deployment_files_have_no_wiring_problems() -> None:
    assert problems(*load()) == []


def test_compose_starts_two_notaries_behind_the_lb_sharing_redis() -> None:
    compose = load()[0]
    nots = notaries(compose)
    assert len(nots) >= 2
    assert {_flag(s["command"], "--redis") for s in nots.values()} == {"redis://redis:6379/0"}
    assert "8443:8443" in compose["services"]["lb"]["ports"]


def _mutate(fn: Any) -> list[str]:
    compose, haproxy, prom, dockerfile = load()
    compose = copy.deepcopy(compose)
    result = fn(compose, haproxy, prom, dockerfile)
    if isinstance(result, tuple) and len(result) == 4:  # the mutation replaced file texts
        compose, haproxy, prom, dockerfile = result
    return problems(compose, haproxy, prom, dockerfile)


def _set_cmd(compose: Doc, svc: str, flag: str, value: str) -> None:
    cmd = compose["services"][svc]["command"]
    cmd[cmd.index(flag) + 1] = value


MUTATIONS = {
    "notaries do not share one Redis URL": lambda c, h, p, d: _set_cmd(
        c, "notary2", "--redis", "redis://redis:6379/1"),
    "does not name the redis service": lambda c, h, p, d: [
        _set_cmd(c, n, "--redis", "redis://127.0.0.1:6379/0") for n in ("notary1", "notary2")],
    "haproxy does not name notary2": lambda c, h, p, d: (
        c, h.replace("server notary2 farm:8444", "server notary2 farm:9999"), p, d),
    "haproxy does not health-check notary1": lambda c, h, p, d: (
        c, h.replace("check port 9100", "check port 9200"), p, d),
    "health check does not ask /readyz": lambda c, h, p, d: _set_cmd(
        c, "notary1", "--metrics-listen", "0.0.0.0:9300"),
    "prometheus does not scrape notary2 exactly once": lambda c, h, p, d: (
        c, h, yaml.safe_load(yaml.safe_dump(p).replace("farm:9110", "farm:9999")), d),
    "grafana is not in the monitoring profile": lambda c, h, p, d: c["services"]["grafana"].pop(
        "profiles"),
    "the notary CLI rejects its command": lambda c, h, p, d: c["services"]["notary1"][
        "command"].append("--no-such-flag"),
    "ports collide": lambda c, h, p, d: _set_cmd(c, "notary2", "--listen", "0.0.0.0:8443"),
    "locust workers do not point at locust-master": lambda c, h, p, d: _set_cmd(
        c, "locust-worker", "--master-host", "elsewhere"),
    "service redis missing": lambda c, h, p, d: c["services"].pop("redis"),
    "volume keys is not declared": lambda c, h, p, d: c["volumes"].pop("keys"),
    "need two or more notaries": lambda c, h, p, d: c["services"].pop("notary2"),
    "keys volume not mounted read-only": lambda c, h, p, d: c["services"]["notary1"].update(
        volumes=["keys:/keys", "farm:/farm:ro"]),
    "Dockerfile lacks stage AS locust": lambda c, h, p, d: (
        c, h, p, d.replace("AS locust", "AS loadgen")),
}


def test_the_dashboard_queries_metrics_the_notary_exports() -> None:
    assert dashboard_problems(json.loads(DASHBOARD.read_text())) == []
    # twin: a panel querying a metric that does not exist, or a watched panel gone, is caught
    broken = json.loads(DASHBOARD.read_text())
    broken["panels"][0]["targets"][0]["expr"] = "rate(notary_no_such_metric_total[1m])"
    found = dashboard_problems(broken)
    assert any("unknown notary_no_such_metric_total" in f for f in found), found
    assert any("does not query notary_requests_total" in f for f in found), found


@pytest.mark.parametrize("expected", sorted(MUTATIONS))
def test_a_broken_copy_is_rejected(expected: str) -> None:
    found = _mutate(MUTATIONS[expected])
    assert any(expected in f for f in found), found

