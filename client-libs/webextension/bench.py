"""A cached verdict adds no measurable delay: a loopback page loaded 100 times in Firefox with
the extension (its verdict cached) and 100 times without, alternately, each load timed by the
page's own Navigation Timing (not rounded: privacy.reduceTimerPrecision off); prints the
ratios of the medians, the goal (<= 1.05) against the floor, the time of one load that asks
the notaries (a miss), and first visits to new names without and with a cookie (the second
sent without it, then again with it once its response confirmed the site). The floor,
measured in the same run: a minimal extension that only holds each response in a blocking
listener and asks Firefox for its certificate (webRequest.getSecurityInfo), which any such
extension must do; and the floor with the extension's rules (static/rules.json and a session
allow rule for the page's host:port), which is what Firefox charges for holding secrets back.
CONVERGE_BENCH_BASELINE=other.xpi adds another build to every round (old against new, paired).
For each browser: the CPU time of its processes per load, by process, and Firefox's own timing
of its declarativeNetRequest rule evaluation. Results:
bench-results.json (client-libs/webextension when CONVERGE_RECORD=1, else var/results/)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
from firefox_env import EXT, ROOT, firefox, make_profile, start_world  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

LOADS = int(os.environ.get("CONVERGE_BENCH_LOADS", "100"))
# CONVERGE_XPI: measure another build of the extension (default: the one test.sh builds)
XPI = Path(os.environ.get("CONVERGE_XPI", EXT / "dist" / "converge-0.1.0.xpi"))
GOAL = 1.05
FIRST = int(os.environ.get("CONVERGE_BENCH_FIRST", "10"))
# CONVERGE_BENCH_BASELINE: another build (e.g. the previous commit's .xpi), loaded in a fourth
# browser in the same rounds: old against new, paired
BASELINE = os.environ.get("CONVERGE_BENCH_BASELINE")
TICK = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d.name))
    return kids


def browser_pids(driver) -> list[int]:  # type: ignore[no-untyped-def]
    """Firefox's processes (the main one and its content processes) under this geckodriver."""
    kids = _children()
    out: list[int] = []
    todo = list(kids.get(driver.service.process.pid, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def role(stat: str) -> str:
    """Which Firefox process, by its name in /proc/PID/stat: "firefox-esr" (the parent),
    "WebExtensions", "Web Content", "Socket Process", ..."""
    return stat[stat.index("(") + 1 : stat.rindex(")")]


def cpu_s(pids: list[int]) -> dict[str, float]:
    """User + system CPU seconds of these processes (and their reaped children), by role."""
    out: dict[str, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            f = stat.rsplit(")", 1)[1].split()
            r = role(stat)
            out[r] = out.get(r, 0.0) + sum(int(x) for x in f[11:15]) / TICK
    return out


def load_ms(driver, url: str) -> float:  # type: ignore[no-untyped-def]
    driver.get(url)
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    return float(
        driver.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            " return n.loadEventEnd - n.startTime;"
        )
    )


FLOOR_BACKGROUND = """
browser.webRequest.onHeadersReceived.addListener(async (d) => {
  await browser.webRequest.getSecurityInfo(d.requestId, {});
  return {};
}, { urls: ["https://*/*"] }, ["blocking"]);
"""


RULES_BACKGROUND = """
const host = %s;
browser.declarativeNetRequest.updateSessionRules({ addRules: ["https", "wss"].map((s, i) => ({
  id: 1000 + i, priority: 2, action: { type: "allow" },
  condition: { urlFilter: `|${s}://${host}/`, resourceTypes: %s },
})) });
"""


def floor_xpi(tmp: Path, rules_for: str | None = None) -> Path:
    """The floor: the blocking listener and getSecurityInfo, nothing else. With `rules_for`
    (a host:port), also the extension's static rules (static/rules.json: secrets stripped and
    bodies blocked everywhere) and a session allow rule for that host:port, as for a site
    confirmed in this session: what Firefox charges for the rules, without the extension's
    own code."""
    import zipfile

    manifest: dict[str, Any] = {
        "manifest_version": 2,
        "name": "floor",
        "version": "1.0",
        "browser_specific_settings": {"gecko": {"id": "floor@converge-notary.github.io"}},
        "permissions": ["webRequest", "webRequestBlocking", "<all_urls>"],
        "background": {"scripts": ["bg.js"], "persistent": True},
    }
    script = FLOOR_BACKGROUND
    if rules_for is not None:
        manifest["permissions"].append("declarativeNetRequest")
        manifest["declarative_net_request"] = {
            "rule_resources": [{"id": "secrets", "enabled": True, "path": "rules.json"}]
        }
        types = json.loads((EXT / "static" / "rules.json").read_text())[0]["condition"]
        script += RULES_BACKGROUND % (json.dumps(rules_for), json.dumps(types["resourceTypes"]))
    xpi = tmp / ("floor-rules.xpi" if rules_for else "floor.xpi")
    with zipfile.ZipFile(xpi, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        z.writestr("bg.js", script)
        if rules_for is not None:
            z.write(EXT / "static" / "rules.json", "rules.json")
    return xpi


def spread(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4)
    return {"p50": statistics.median(xs), "p25": q[0], "p75": q[2], "mean": statistics.fmean(xs)}


# the pages' own timings in microseconds, not rounded to whole milliseconds (all three browsers)
PREFS = {"privacy.reduceTimerPrecision": False}


def commit() -> str:
    """The checkout's commit (with "+changes" when the extension's files differ from it)."""
    git = ["git", "-C", str(EXT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "src", "static"]).returncode
    return head.stdout.strip() + ("+changes" if dirty else "")


def summary(doc: dict[str, Any]) -> dict[str, object]:
    """One run in a line: when, the load, the medians and the ratio against the floor."""
    return {
        "when": doc["when"],
        "commit": doc.get("commit"),
        "loads": doc["loads"],
        "loadavg_before": doc["machine"].get("loadavg_before"),
        "loadavg": doc["machine"]["loadavg"],
        "with_extension_p50": doc["with_extension_cached_ms"]["p50"],
        "floor_p50": doc["floor_extension_ms"]["p50"],
        "without_p50": doc["without_extension_ms"]["p50"],
        "ratio_to_floor_p50": doc["ratio_to_floor_p50"],
        "paired_ratio_to_floor_p50": doc.get("paired_ratio_to_floor_p50"),
        "cpu_ratio_to_floor": doc.get("cpu_ratio_to_floor"),
        "ratio_to_floor_rules_p50": doc.get("ratio_to_floor_rules_p50"),
        "cpu_ratio_to_floor_rules": doc.get("cpu_ratio_to_floor_rules"),
        "baseline": doc.get("baseline"),
    }


def dnr_evaluations(driver) -> tuple[float, int] | None:  # type: ignore[no-untyped-def]
    """Firefox's own timing of declarativeNetRequest rule evaluation (its Glean metric
    extensions.apis.dnr.evaluate_rules_time): total milliseconds and requests evaluated."""
    try:
        with driver.context(driver.CONTEXT_CHROME):
            v = driver.execute_script(
                "const v = Glean.extensionsApisDnr.evaluateRulesTime.testGetValue();"
                "return v ? [v.sum, v.count] : [0, 0];"
            )
        return float(v[0]) / 1e6, int(v[1])
    except Exception:  # noqa: BLE001 (a metric this Firefox does not have: not measured)
        return None


def with_extension(w, xpi: Path):  # type: ignore[no-untyped-def]
    """A browser with this build installed and the notaries imported."""
    profile, uuid = make_profile(w, PREFS)
    d = firefox(profile)
    first = d.current_window_handle
    d.install_addon(str(xpi), temporary=True)
    d.switch_to.new_window("tab")
    d.get(f"moz-extension://{uuid}/options.html")
    d.find_element(By.ID, "import-bundle").send_keys("\n".join(str(n.bundle) for n in w.notaries))
    time.sleep(1.0)
    # one tab, as in the other browsers (the options page and the first-run page closed)
    for h in d.window_handles:
        if h != first:
            d.switch_to.window(h)
            d.close()
    d.switch_to.window(first)
    return d


def main() -> int:
    load_before = os.getloadavg()
    w = start_world()
    drivers = []
    try:
        url = f"https://good.test:{w.good.port}/"
        a = with_extension(w, XPI)
        drivers.append(a)
        miss = load_ms(a, url)  # the first load asks the notaries
        assert "genuine good.test" in a.find_element(By.TAG_NAME, "body").text
        b = firefox(make_profile(w, PREFS)[0])
        drivers.append(b)
        c = firefox(make_profile(w, PREFS)[0])
        drivers.append(c)
        c.install_addon(str(floor_xpi(w.tmp)), temporary=True)
        # the floor with the rules: the same listener, plus the extension's rules (the part of
        # the cost that is Firefox's evaluation of declarativeNetRequest rules)
        e = firefox(make_profile(w, PREFS)[0])
        drivers.append(e)
        e.install_addon(str(floor_xpi(w.tmp, f"good.test:{w.good.port}")), temporary=True)
        browsers = {"with": a, "without": b, "floor": c, "floor_rules": e}
        if BASELINE:
            browsers["baseline"] = with_extension(w, Path(BASELINE))
            drivers.append(browsers["baseline"])
        for d in browsers.values():  # warm them
            for _ in range(5):
                load_ms(d, url)
        asked = sum(n.requests_answered() for n in w.notaries)
        times: dict[str, list[float]] = {k: [] for k in browsers}
        # CPU seconds of each browser's processes over its measured loads, by process role
        cpu: dict[str, dict[str, float]] = {k: {} for k in browsers}
        pids = {k: browser_pids(d) for k, d in browsers.items()}
        dnr0 = {k: dnr_evaluations(d) for k, d in browsers.items()}
        names = list(browsers)
        for i in range(LOADS):
            # each round starts with the next browser: the first in a round was measured
            # carrying about 5% more, whichever build it had
            for k in names[i % len(names) :] + names[: i % len(names)]:
                d = browsers[k]
                c0 = cpu_s(pids[k])
                times[k].append(load_ms(d, url))
                for r, v in cpu_s(pids[k]).items():
                    cpu[k][r] = cpu[k].get(r, 0.0) + v - c0.get(r, 0.0)
        on, off, floor = times["with"], times["without"], times["floor"]
        # the rules' evaluation in Firefox's parent process, per load (None: not measured)
        dnr_ms: dict[str, dict[str, float] | None] = {}
        for k, d in browsers.items():
            before, after = dnr0[k], dnr_evaluations(d)
            dnr_ms[k] = (
                {
                    "ms_per_load": (after[0] - before[0]) / LOADS,
                    "evaluations_per_load": (after[1] - before[1]) / LOADS,
                }
                if before is not None and after is not None
                else None
            )
        cpu_ms = {k: 1000 * sum(v.values()) / LOADS for k, v in cpu.items()}
        cpu_roles = {
            k: {r: round(1000 * x / LOADS, 2) for r, x in sorted(v.items())} for k, v in cpu.items()
        }
        assert sum(n.requests_answered() for n in w.notaries) == asked, (
            "a cached load asked a notary"
        )
        # after the measured loads (their names and cookies not in the measured browser)
        # first visits: without a cookie (the response is checked), then with one (held until
        # a credential-less HEAD showed the certificate and it was checked): new names each
        site = f"https://{{}}:{w.many.port}/"
        plain = [load_ms(a, site.format(w.many_names[i])) for i in range(FIRST)]
        load_ms(a, site.format("many.test") + "setcookie?domain=many.test")
        secret = [load_ms(a, site.format(w.many_names[FIRST + i])) for i in range(FIRST)]
        # each went first without the cookie (the site not yet confirmed), then again with it
        for name in w.many_names[FIRST : 2 * FIRST]:
            got = [h for h in w.many.hits if h.host.split(":")[0] == name]
            assert got and got[0].cookie == "", got
            assert any("SECRET-SESSION" in h.cookie for h in got[1:]), got
        ratio = statistics.median(on) / statistics.median(off)
        to_floor = statistics.median(on) / statistics.median(floor)
        paired = [x / y for x, y in zip(on, floor, strict=True)]
        floor_ratio = statistics.median(floor) / statistics.median(off)
        doc = {
            "suite": "webextension",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit(),
            "machine": {
                "cpus": os.cpu_count(),
                "loadavg_before": load_before,
                "loadavg": os.getloadavg(),
            },
            "loads": LOADS,
            "with_extension_cached_ms": spread(on),
            "without_extension_ms": spread(off),
            "floor_extension_ms": spread(floor),
            "ratio_p50": ratio,
            "floor_ratio_p50": floor_ratio,
            "ratio_to_floor_p50": to_floor,
            # each round loads the page in the three browsers one after the other: the median
            # of the rounds' own ratios is less moved by the machine's load changing over time
            "paired_ratio_to_floor_p50": statistics.median(paired),
            "goal": GOAL,
            "met": to_floor <= GOAL,
            # CPU time of the browser's processes per load (less moved by the machine's load
            # than wall time), and its ratio against the floor
            "cpu_ms_per_load": cpu_ms,
            "cpu_ms_per_load_by_process": cpu_roles,
            "dnr_evaluation": dnr_ms,
            "cpu_ratio_to_floor": cpu_ms["with"] / cpu_ms["floor"],
            # against the floor with the same rules: what the extension's own code costs
            "floor_rules_ms": spread(times["floor_rules"]),
            "ratio_to_floor_rules_p50": statistics.median(on)
            / statistics.median(times["floor_rules"]),
            "paired_ratio_to_floor_rules_p50": statistics.median(
                [x / y for x, y in zip(on, times["floor_rules"], strict=True)]
            ),
            "floor_rules_ratio_to_floor_p50": statistics.median(times["floor_rules"])
            / statistics.median(floor),
            "cpu_ratio_to_floor_rules": cpu_ms["with"] / cpu_ms["floor_rules"],
            "miss_first_load_ms": miss,
            "first_visit_no_secret_ms": {"p50": statistics.median(plain), "runs": FIRST},
            "first_visit_with_cookie_ms": {"p50": statistics.median(secret), "runs": FIRST},
        }
        if BASELINE:
            old = times["baseline"]
            doc["baseline"] = {
                "xpi": Path(BASELINE).name,
                "ms": spread(old),
                "ratio_to_floor_p50": statistics.median(old) / statistics.median(floor),
                "paired_ratio_to_floor_p50": statistics.median(
                    [x / y for x, y in zip(old, floor, strict=True)]
                ),
                # new build against the baseline, each round's own ratio
                "new_over_baseline_paired_p50": statistics.median(
                    [x / y for x, y in zip(on, old, strict=True)]
                ),
                "new_over_baseline_cpu": cpu_ms["with"] / cpu_ms["baseline"],
                "cpu_ratio_to_floor": cpu_ms["baseline"] / cpu_ms["floor"],
            }
        record = os.environ.get("CONVERGE_RECORD") == "1"
        out = (
            EXT / "bench-results.json"
            if record
            else ROOT / "var" / "results" / "client-libs" / "webextension" / "bench-results.json"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        # the summaries of the earlier runs kept in the file (the newest 9): runs on a shared
        # machine are compared, not one alone
        runs: list[dict[str, object]] = []
        if out.exists():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                before = json.loads(out.read_text())
                runs = [*before.get("earlier_runs", []), summary(before)][-9:]
        doc["earlier_runs"] = runs
        out.write_text(json.dumps(doc, indent=2) + "\n")
        met = "met" if to_floor <= GOAL else "NOT met"
        print(
            f"webextension: {LOADS} loads each; with the extension (cached) p50 "
            f"{statistics.median(on):.1f} ms, without p50 {statistics.median(off):.1f} ms, "
            f"ratio {ratio:.3f}; the floor (a blocking listener and getSecurityInfo only) p50 "
            f"{statistics.median(floor):.1f} ms, ratio {floor_ratio:.3f}; against the floor "
            f"{to_floor:.3f} (goal <= {GOAL}: {met}); a load that asks the notaries: "
            f"{miss:.1f} ms; first visits (notaries asked) p50 {statistics.median(plain):.1f} ms "
            f"without a cookie, {statistics.median(secret):.1f} ms with one (sent again with it)"
        )
        print(
            "CPU per load (ms): "
            + ", ".join(f"{k} {v:.1f}" for k, v in cpu_ms.items())
            + f"; with / floor {cpu_ms['with'] / cpu_ms['floor']:.3f}"
            + f", with / floor with rules {cpu_ms['with'] / cpu_ms['floor_rules']:.3f}"
        )
        print(
            f"the floor with the rules: p50 {statistics.median(times['floor_rules']):.1f} ms, "
            f"{doc['floor_rules_ratio_to_floor_p50']:.3f} of the floor; the extension against it "
            f"{doc['ratio_to_floor_rules_p50']:.3f} "
            f"(paired {doc['paired_ratio_to_floor_rules_p50']:.3f})"
        )
        print(f"CPU per load by process (ms): {cpu_roles}")
        print(f"declarativeNetRequest evaluation per load: {dnr_ms}")
        if BASELINE:
            bl = doc["baseline"]
            print(
                f"baseline {bl['xpi']}: p50 {bl['ms']['p50']:.1f} ms, to floor "
                f"{bl['ratio_to_floor_p50']:.3f} (paired {bl['paired_ratio_to_floor_p50']:.3f}); "
                f"new / baseline paired {bl['new_over_baseline_paired_p50']:.3f}, "
                f"CPU {bl['new_over_baseline_cpu']:.3f}"
            )
        print(f"wrote {out}")
        return 0 if to_floor <= GOAL else 1
    finally:
        for d in drivers:
            d.quit()
        w.close()


if __name__ == "__main__":
    sys.exit(main())
