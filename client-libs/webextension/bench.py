"""A cached verdict adds no measurable delay: a loopback page loaded 100 times in Firefox with
the extension (its verdict cached) and 100 times without, alternately, each load timed by the
page's own Navigation Timing; prints the ratio of the medians (goal <= 1.05), the time of
one load that asks the notaries (a miss), and first visits to new names without and with a
cookie (the second held for a credential-less HEAD and the check before it leaves). The
floor, measured in the same run: a minimal extension that only holds each response in a
blocking listener and asks Firefox for its certificate (webRequest.getSecurityInfo), which
any such extension must do. Results:
bench-results.json (client-libs/webextension when CONVERGE_RECORD=1, else var/results/)."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
from firefox_env import EXT, ROOT, firefox, make_profile, start_world  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

LOADS = int(os.environ.get("CONVERGE_BENCH_LOADS", "100"))
# CONVERGE_XPI: measure another build of the extension (default: the one test.sh builds)
XPI = Path(os.environ.get("CONVERGE_XPI", EXT / "dist" / "converge-0.1.0.xpi"))
GOAL = 1.05
FIRST = int(os.environ.get("CONVERGE_BENCH_FIRST", "10"))


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


def floor_xpi(tmp: Path) -> Path:
    """The floor: the blocking listener and getSecurityInfo, nothing else."""
    import zipfile

    manifest = {
        "manifest_version": 2,
        "name": "floor",
        "version": "1.0",
        "browser_specific_settings": {"gecko": {"id": "floor@converge-notary.github.io"}},
        "permissions": ["webRequest", "webRequestBlocking", "<all_urls>"],
        "background": {"scripts": ["bg.js"], "persistent": True},
    }
    xpi = tmp / "floor.xpi"
    with zipfile.ZipFile(xpi, "w") as z:
        z.writestr("manifest.json", json.dumps(manifest))
        z.writestr("bg.js", FLOOR_BACKGROUND)
    return xpi


def main() -> int:
    w = start_world()
    drivers = []
    try:
        url = f"https://good.test:{w.good.port}/"
        with_ext, uuid = make_profile(w)
        a = firefox(with_ext)
        drivers.append(a)
        a.install_addon(str(XPI), temporary=True)
        a.switch_to.new_window("tab")
        a.get(f"moz-extension://{uuid}/options.html")
        a.find_element(By.ID, "import-bundle").send_keys(
            "\n".join(str(n.bundle) for n in w.notaries)
        )
        time.sleep(1.0)
        a.switch_to.new_window("tab")
        miss = load_ms(a, url)  # the first load asks the notaries
        assert "genuine good.test" in a.find_element(By.TAG_NAME, "body").text
        # first visits: without a cookie (the response is checked), then with one (held until
        # a credential-less HEAD showed the certificate and it was checked): new names each
        site = f"https://{{}}:{w.many.port}/"
        plain = [load_ms(a, site.format(w.many_names[i])) for i in range(FIRST)]
        load_ms(a, site.format("many.test") + "setcookie?domain=many.test")
        secret = [load_ms(a, site.format(w.many_names[FIRST + i])) for i in range(FIRST)]
        heads = [h for h in w.many.hits if h.method == "HEAD"]
        assert len(heads) == FIRST and all(h.cookie == "" for h in heads), heads
        b = firefox(make_profile(w)[0])
        drivers.append(b)
        c = firefox(make_profile(w)[0])
        drivers.append(c)
        c.install_addon(str(floor_xpi(w.tmp)), temporary=True)
        for d in (a, b, c):  # warm them
            for _ in range(5):
                load_ms(d, url)
        asked = sum(n.requests_answered() for n in w.notaries)
        on, off, floor = [], [], []
        for _ in range(LOADS):
            on.append(load_ms(a, url))
            off.append(load_ms(b, url))
            floor.append(load_ms(c, url))
        assert sum(n.requests_answered() for n in w.notaries) == asked, (
            "a cached load asked a notary"
        )
        ratio = statistics.median(on) / statistics.median(off)
        floor_ratio = statistics.median(floor) / statistics.median(off)
        doc = {
            "suite": "webextension",
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"cpus": os.cpu_count(), "loadavg": os.getloadavg()},
            "loads": LOADS,
            "with_extension_cached_ms": {
                "p50": statistics.median(on),
                "mean": statistics.fmean(on),
            },
            "without_extension_ms": {"p50": statistics.median(off), "mean": statistics.fmean(off)},
            "floor_extension_ms": {
                "p50": statistics.median(floor),
                "mean": statistics.fmean(floor),
            },
            "ratio_p50": ratio,
            "floor_ratio_p50": floor_ratio,
            "ratio_to_floor_p50": statistics.median(on) / statistics.median(floor),
            "goal": GOAL,
            "met": ratio <= GOAL,
            "miss_first_load_ms": miss,
            "first_visit_no_secret_ms": {"p50": statistics.median(plain), "runs": FIRST},
            "first_visit_with_cookie_ms": {"p50": statistics.median(secret), "runs": FIRST},
        }
        record = os.environ.get("CONVERGE_RECORD") == "1"
        out = (
            EXT / "bench-results.json"
            if record
            else ROOT / "var" / "results" / "client-libs" / "webextension" / "bench-results.json"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=2) + "\n")
        met = "met" if ratio <= GOAL else "NOT met"
        print(
            f"webextension: {LOADS} loads each; with the extension (cached) p50 "
            f"{statistics.median(on):.1f} ms, without p50 {statistics.median(off):.1f} ms, "
            f"ratio {ratio:.3f} (goal <= {GOAL}: {met}); the floor (a blocking listener and "
            f"getSecurityInfo only) p50 {statistics.median(floor):.1f} ms, ratio "
            f"{floor_ratio:.3f}; a load that asks the notaries: {miss:.1f} ms; first visits "
            f"(notaries asked) p50 {statistics.median(plain):.1f} ms without a cookie, "
            f"{statistics.median(secret):.1f} ms with one (held for the HEAD and the check)"
        )
        print(f"wrote {out}")
        return 0 if ratio <= GOAL else 1
    finally:
        for d in drivers:
            d.quit()
        w.close()


if __name__ == "__main__":
    sys.exit(main())
