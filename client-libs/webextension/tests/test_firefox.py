"""The extension in a real, headless Firefox (firefox_env.py sets up the world).

One browser, one fresh profile, the tests in order (each leans on the state the previous left):
before the extension, the forgery loads and gets the cookie and the form (the twin of
everything after); a fresh install says "not configured" and opens its first-run page; with
notaries and the default settings: a forged bank at a private address is blocked and gets no
cookie and no body (the genuine site gets both, after its certificate is confirmed); behind a
proxy on loopback; over wss://; through a redirect; as a subresource, fetch, XHR and from a
service worker; after a genuine first visit; a page with 200 host names does not make a
genuine site fail; the extension's own cache writes do not reload it; a replayed answer, the
notaries unreachable and a cached verdict. Screenshots go to var/results/webextension/.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("selenium")
from firefox_env import (  # noqa: E402
    ADDON_ID,
    ARTIFACTS,
    XPI,
    World,
    firefox,
    make_profile,
)
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = [
    pytest.mark.skipif(
        shutil.which("firefox-esr") is None and shutil.which("firefox") is None,
        reason="Firefox not installed (scripts/install-system-deps)",
    ),
    pytest.mark.skipif(shutil.which("certutil") is None, reason="certutil not installed"),
    pytest.mark.timeout(600),
]


def page_text(driver: Any) -> str:
    """The page's text ("" while the page is being replaced)."""
    try:
        return str(driver.find_element(By.TAG_NAME, "body").text)
    except WebDriverException:
        return ""


def fresh_tab(driver: Any) -> None:
    """Work in a new tab, the others closed (Firefox does not let WebDriver navigate a tab
    between web content and extension pages)."""
    old = list(driver.window_handles)
    driver.switch_to.new_window("tab")
    keep = driver.current_window_handle
    for h in old:
        driver.switch_to.window(h)
        driver.close()
    driver.switch_to.window(keep)


def visit(driver: Any, url: str) -> None:
    fresh_tab(driver)
    # a cancelled load is reported as an error; the tab then shows the block page
    with contextlib.suppress(WebDriverException):
        driver.get(url)
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
    time.sleep(0.3)


def wait_blocked(driver: Any) -> str:
    WebDriverWait(driver, 30).until(
        lambda d: (
            d.current_url.startswith("moz-extension://")
            and "untrusted" in d.find_element(By.ID, "converge-verdict").text
        )
    )
    return str(driver.find_element(By.ID, "converge-verdict").text)


def options(driver: Any, ext_uuid: str) -> None:
    fresh_tab(driver)
    driver.get(f"moz-extension://{ext_uuid}/options.html")
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "stats").text)


def stats(driver: Any, ext_uuid: str) -> tuple[int, int]:
    """(times the background read its settings, sites in its cache)."""
    options(driver, ext_uuid)
    el = driver.find_element(By.ID, "stats")
    return int(el.get_attribute("data-loads")), int(el.get_attribute("data-cache-entries"))


def settle(driver: Any, ext_uuid: str) -> None:
    """Waits until no notary question of the pages before is waiting or running."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        options(driver, ext_uuid)
        if driver.find_element(By.ID, "stats").get_attribute("data-waiting") == "0":
            return
        time.sleep(1)
    raise AssertionError("notary questions still running after 60 s")


def popup(driver: Any, ext_uuid: str, site: str, expect: str | None = None) -> str:
    """The popup's view of the tab showing `site`, in a tab of its own."""
    driver.switch_to.new_window("tab")
    driver.get(f"moz-extension://{ext_uuid}/popup.html?for={site}")
    want = expect or site.split("/")[2].split(":")[0]
    WebDriverWait(driver, 10).until(lambda d: want in d.find_element(By.ID, "popup-verdict").text)
    return str(driver.find_element(By.ID, "popup-verdict").text)


def import_bundles(driver: Any, ext_uuid: str, paths: list[Path]) -> None:
    options(driver, ext_uuid)
    driver.find_element(By.ID, "import-bundle").send_keys("\n".join(str(p) for p in paths))
    WebDriverWait(driver, 10).until(
        lambda d: all(
            p.name.split(".")[0].replace("-", " ") in d.find_element(By.ID, "notaries").text
            for p in paths
        )
    )
    time.sleep(0.5)


def set_enabled(driver: Any, ext_uuid: str, names: set[str]) -> None:
    options(driver, ext_uuid)
    WebDriverWait(driver, 10).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "input.enable-notary")
    )
    for box in driver.find_elements(By.CSS_SELECTOR, "input.enable-notary"):
        want = box.get_attribute("data-name") in names
        if box.is_selected() != want:
            box.click()
    time.sleep(0.5)
    forget(driver, ext_uuid, reopen=False)


def forget(driver: Any, ext_uuid: str, reopen: bool = True) -> None:
    """Forget the cache and this session's confirmations: every site is new again."""
    if reopen:
        options(driver, ext_uuid)
    driver.find_element(By.ID, "forget-cache").click()
    WebDriverWait(driver, 10).until(
        lambda d: "forgotten" in d.find_element(By.ID, "save-status").text
    )


def set_number(driver: Any, ext_uuid: str, element_id: str, value: int) -> None:
    options(driver, ext_uuid)
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event('change'));",
        element_id,
        str(value),
    )
    WebDriverWait(driver, 10).until(lambda d: "saved" in d.find_element(By.ID, "save-status").text)
    options(driver, ext_uuid)  # stored: a fresh options page shows it
    assert driver.find_element(By.ID, element_id).get_attribute("value") == str(value)


def set_prefs(driver: Any, prefs: dict[str, Any]) -> None:
    """Firefox preferences, changed in the running browser (WebDriver's chrome context)."""
    with driver.context(driver.CONTEXT_CHROME):
        for name, value in prefs.items():
            driver.execute_script(
                "const [n, v] = arguments;"
                "if (typeof v === 'number') Services.prefs.setIntPref(n, v);"
                "else if (typeof v === 'boolean') Services.prefs.setBoolPref(n, v);"
                "else Services.prefs.setStringPref(n, v);",
                name,
                value,
            )


def allow_private_windows(driver: Any) -> None:
    """What about:addons -> "Run in Private Windows" -> Allow does, then the add-on reloaded."""
    fresh_tab(driver)
    driver.get("about:blank")
    with driver.context(driver.CONTEXT_CHROME):
        driver.set_script_timeout(20)
        said = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "const { ExtensionPermissions } = ChromeUtils.importESModule("
            "  'resource://gre/modules/ExtensionPermissions.sys.mjs');"
            "const { AddonManager } = ChromeUtils.importESModule("
            "  'resource://gre/modules/AddonManager.sys.mjs');"
            "ExtensionPermissions.add(arguments[0],"
            "  { permissions: ['internal:privateBrowsingAllowed'], origins: [] })"
            "  .then(() => AddonManager.getAddonByID(arguments[0]))"
            "  .then((a) => { done('ok'); a.reload(); }, (e) => done('error ' + e));",
            ADDON_ID,
        )
    assert said == "ok", said
    time.sleep(3)


def post_form(driver: Any, action: str) -> None:
    """Submits a login form (a password in the body) as a top-level POST to `action`."""
    driver.execute_script(
        "const f = document.createElement('form'); f.method = 'POST'; f.action = arguments[0];"
        "const i = document.createElement('input'); i.name = 'password'; i.value = 'hunter2';"
        "f.append(i); document.body.append(f); f.submit();",
        action,
    )


def probe(driver: Any, script: str, *args: Any) -> Any:
    """Runs `script` (which calls done(result)) in the current page and returns its result."""
    driver.set_script_timeout(60)
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; const args = arguments;" + script, *args
    )


WS = (
    "const ws = new WebSocket(args[0]); const t = setTimeout(() => done('timeout'), 20000);"
    "ws.onopen = () => { clearTimeout(t); done('open'); ws.close(); };"
    "ws.onerror = () => { clearTimeout(t); done('error'); };"
)
IMG = (
    "const i = new Image(); i.onload = () => done('load'); i.onerror = () => done('error');"
    "i.src = args[0];"
)
FETCH = "fetch(args[0], {cache: 'no-store'}).then(r => done('ok ' + r.status), e => done('error'));"
XHR = (
    "const x = new XMLHttpRequest(); x.open('GET', args[0]);"
    "x.onload = () => done('ok ' + x.status); x.onerror = () => done('error'); x.send();"
)
SW = (
    "navigator.serviceWorker.register('/sw.js').then(() => navigator.serviceWorker.ready)"
    ".then((reg) => { const results = [];"
    "  navigator.serviceWorker.onmessage = (e) => { results.push(e.data);"
    "    if (results.length === 1) reg.active.postMessage(args[1]);"
    "    else done(results); };"
    "  reg.active.postMessage(args[0]); })"
    ".catch((e) => done(['register failed ' + e]));"
)


def urls(world: World) -> tuple[str, str]:
    return f"https://bank.test:{world.bank_forged.port}/", f"https://good.test:{world.good.port}/"


def test_without_the_extension_the_forgery_loads_and_gets_the_secrets(
    world: World, browser: tuple[Any, str]
) -> None:
    """The twin of everything below: the browser alone trusts the compromised CA."""
    driver, _ = browser
    bank, good = urls(world)
    visit(driver, bank + "setcookie")
    assert "forged bank.test" in page_text(driver)
    visit(driver, good + "setcookie")
    visit(driver, bank)
    post_form(driver, bank + "login")
    WebDriverWait(driver, 20).until(lambda d: "posted" in page_text(d))
    posts = [h for h in world.bank_forged.hits if h.method == "POST"]
    assert posts and b"hunter2" in posts[-1].body and "SECRET-SESSION" in posts[-1].cookie


def test_fresh_install_not_configured_first_run(world: World, browser: tuple[Any, str]) -> None:
    driver, ext_uuid = browser
    _, good = urls(world)
    before = set(driver.window_handles)
    driver.install_addon(str(XPI), temporary=True)
    # the first-run page opens by itself
    WebDriverWait(driver, 15).until(lambda d: len(set(d.window_handles) - before) >= 1)
    driver.switch_to.window(next(iter(set(driver.window_handles) - before)))
    WebDriverWait(driver, 10).until(lambda d: "first-run" in d.current_url)
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "first-run").is_displayed())
    assert "nothing is checked" in page_text(driver)
    assert "Private windows" in driver.find_element(By.ID, "private-windows").text
    driver.save_screenshot(str(ARTIFACTS / "first-run.png"))
    # not configured: pages load as without the extension, and the popup says why
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
    assert "not configured" in popup(driver, ext_uuid, good, expect="not configured")
    assert "Private windows: NOT checked" in driver.find_element(By.ID, "popup-private").text
    driver.save_screenshot(str(ARTIFACTS / "popup-not-configured.png"))
    # twin: once the user allows private windows (about:addons; here through the add-on
    # manager, then the add-on reloaded), options and popup say they are checked
    allow_private_windows(driver)
    options(driver, ext_uuid)
    assert "Private windows: checked" in driver.find_element(By.ID, "private-windows").text
    popup(driver, ext_uuid, good, expect="not configured")
    assert "Private windows: checked" in driver.find_element(By.ID, "popup-private").text


def test_forged_bank_at_a_private_address_gets_no_cookie_and_no_form(
    world: World, browser: tuple[Any, str]
) -> None:
    driver, ext_uuid = browser
    bank, good = urls(world)
    # the operator's bundle list, by URL, as the first-run page suggests
    options(driver, ext_uuid)
    driver.find_element(By.ID, "import-url").send_keys(good + "notaries.json")
    driver.find_element(By.ID, "import-url-button").click()
    WebDriverWait(driver, 20).until(
        lambda d: "imported Org A; imported Org B" in d.find_element(By.ID, "import-status").text
    )
    time.sleep(0.5)
    # the twin of "not configured": now the popup reports a verdict
    visit(driver, good)
    assert "trusted" in popup(driver, ext_uuid, good)
    driver.save_screenshot(str(ARTIFACTS / "popup-trusted.png"))
    # default settings; the forgery is at 127.0.0.1 and the browser holds its cookie
    seen = len(world.bank_forged.hits)
    visit(driver, bank)
    text = wait_blocked(driver)
    assert "untrusted" in text and "bank.test" in text
    body = page_text(driver)
    assert "sees a different certificate" in body and "Org A" in body and "Org B" in body
    assert "Nothing secret" in driver.find_element(By.ID, "sent").text
    driver.save_screenshot(str(ARTIFACTS / "block-page-compromised-ca.png"))
    # a login form posted to it from a genuine page
    visit(driver, good)
    with contextlib.suppress(WebDriverException):
        post_form(driver, bank + "login")
    wait_blocked(driver)
    assert "held" in driver.find_element(By.ID, "sent").text
    driver.save_screenshot(str(ARTIFACTS / "block-page-form-held.png"))
    got = world.bank_forged.hits[seen:]
    # the page's GET went without the cookie (stripped by the session rule), the form was not
    # sent (blocked by it); a HEAD without cookies showed the certificate
    assert any(h.method == "HEAD" for h in got), "the forged server saw the credential-less HEAD"
    assert all(h.method in ("GET", "HEAD") and h.cookie == "" and h.body == b"" for h in got), got


def test_genuine_site_gets_its_cookie_and_form_after_the_check(
    world: World, browser: tuple[Any, str]
) -> None:
    """Twin: the same flow to a genuine site delivers the cookie and the body: the first GET
    goes without the cookie (the site not yet confirmed in this session), its response confirms
    the site, and it is sent again with the cookie."""
    driver, ext_uuid = browser
    _, good = urls(world)
    forget(driver, ext_uuid)
    seen = len(world.good.hits)
    visit(driver, good + "account")
    assert "genuine good.test" in page_text(driver)
    got = world.good.hits[seen:]
    assert got[0].method == "GET" and got[0].path == "/account" and got[0].cookie == "", got
    assert any(h.path == "/account" and "SECRET-SESSION" in h.cookie for h in got[1:]), got
    post_form(driver, good + "login")
    WebDriverWait(driver, 20).until(lambda d: "posted" in page_text(d))
    posts = [h for h in world.good.hits[seen:] if h.method == "POST"]
    assert posts and b"hunter2" in posts[-1].body and "SECRET-SESSION" in posts[-1].cookie


def test_behind_a_proxy_on_loopback(world: World, browser: tuple[Any, str]) -> None:
    driver, _ = browser
    bank, good = urls(world)
    set_prefs(
        driver,
        {
            "network.proxy.type": 1,
            "network.proxy.ssl": "127.0.0.1",
            "network.proxy.ssl_port": world.proxy.port,
        },
    )
    try:
        visit(driver, bank + "?via-proxy")
        assert "bank.test" in wait_blocked(driver)
        assert f"bank.test:{world.bank_forged.port}" in world.proxy.asked
        # twin: the genuine site through the same proxy loads
        visit(driver, good + "?via-proxy")
        assert "genuine good.test" in page_text(driver)
        assert f"good.test:{world.good.port}" in world.proxy.asked
    finally:
        set_prefs(driver, {"network.proxy.type": 0})


def test_websocket_redirect_subresources_fetch_xhr_service_worker(
    world: World, browser: tuple[Any, str]
) -> None:
    driver, _ = browser
    bank, good = urls(world)
    wss_bank = f"wss://bank.test:{world.bank_forged.port}/ws"
    wss_good = f"wss://good.test:{world.good.port}/ws"
    visit(driver, good)
    seen = len(world.bank_forged.hits)
    assert probe(driver, WS, wss_bank) == "error"
    # a cross-site handshake carries no cookie (Firefox partitions them): it may reach the
    # forgery, whose 101 answer is then refused on its certificate
    assert all(h.cookie == "" and h.body == b"" for h in world.bank_forged.hits[seen:])
    assert probe(driver, WS, wss_good) == "open"  # twin
    assert probe(driver, IMG, bank + "img.gif") == "error"
    assert probe(driver, IMG, good + "img.gif") == "load"
    assert probe(driver, FETCH, bank + "data") == "error"
    assert probe(driver, FETCH, good + "data") == "ok 200"
    assert probe(driver, XHR, bank + "data") == "error"
    assert probe(driver, XHR, good + "data") == "ok 200"
    from_sw = probe(driver, SW, bank + "from-sw", good + "from-sw")
    assert from_sw[0].startswith("error") and from_sw[1] == "ok 200", from_sw
    assert any(h.path == "/from-sw" for h in world.good.hits)
    # a redirect from a genuine page to the forgery is checked on the forgery
    visit(driver, good + "redirect?" + bank)
    assert "bank.test" in wait_blocked(driver)
    visit(driver, good + "redirect?" + good + "landed")  # twin
    assert "genuine good.test" in page_text(driver)
    assert any(h.path == "/landed" for h in world.good.hits)


def test_http2(world: World, browser: tuple[Any, str]) -> None:
    driver, _ = browser
    visit(driver, f"https://bank.test:{world.h2_forged.port}/over-h2")
    assert "bank.test" in wait_blocked(driver)
    assert any(line.endswith(" 2.0") for line in world.h2_forged.log())  # it did speak HTTP/2
    # the browser holds a bank.test cookie: it did not reach the forgery over HTTP/2 either
    over = [line for line in world.h2_forged.log() if "/over-h2" in line]
    assert over and all("cookie:no" in line for line in over), over
    visit(driver, f"https://good.test:{world.h2_good.port}/over-h2")  # twin
    assert "genuine good.test over HTTP/2.0" in page_text(driver)


def test_a_form_to_a_site_not_yet_confirmed_is_not_sent_until_it_is(
    world: World, browser: tuple[Any, str]
) -> None:
    """A form posted to a genuine site not confirmed in this session is dropped by the rules
    (not sent), checked with a HEAD, and the page says so; sent again, it goes (the twin)."""
    driver, ext_uuid = browser
    _, good = urls(world)
    other = f"https://good.test:{world.h2_good.port}/"
    forget(driver, ext_uuid)
    visit(driver, good)
    with contextlib.suppress(WebDriverException):
        post_form(driver, other + "login")
    WebDriverWait(driver, 30).until(
        lambda d: (
            d.current_url.startswith("moz-extension://")
            and "not sent" in d.find_element(By.ID, "converge-verdict").text
        )
    )
    assert "go back and send the form again" in page_text(driver).lower()
    assert "held back" in driver.find_element(By.ID, "sent").text
    assert not any(line.startswith("POST /login") for line in world.h2_good.log())
    assert any(line.startswith("HEAD / ") for line in world.h2_good.log())
    visit(driver, good)
    post_form(driver, other + "login")
    WebDriverWait(driver, 20).until(lambda d: "genuine good.test" in page_text(d))
    assert any(line.startswith("POST /login") for line in world.h2_good.log())


def test_after_a_genuine_first_visit(world: World, browser: tuple[Any, str]) -> None:
    driver, _ = browser
    swap = f"https://swap.test:{world.swap.port}/"
    visit(driver, swap)
    assert "swap.test" in page_text(driver) and "moz-extension" not in driver.current_url
    world.swap.serve(world.evil_ca.issue_cert("swap.test"))
    try:
        visit(driver, swap + "?again")
        assert "swap.test" in wait_blocked(driver)
    finally:
        assert world.swap_cert is not None
        world.swap.serve(world.swap_cert)


def test_an_untrusted_certificate_withdraws_the_confirmation(
    world: World, browser: tuple[Any, str]
) -> None:
    """The session rules: a site confirmed in this session gets its cookie (the twin); once it
    shows a certificate the notaries do not see, its allow rule is removed and the next
    request to it goes without the cookie."""
    driver, _ = browser
    swap = f"https://swap.test:{world.swap.port}/"
    visit(driver, swap + "setcookie")
    seen = len(world.swap.hits)
    visit(driver, swap + "?confirmed")
    assert "swap.test" in page_text(driver) and "moz-extension" not in driver.current_url
    confirmed = [h for h in world.swap.hits[seen:] if h.path == "/?confirmed"]
    assert confirmed and "SECRET-SESSION" in confirmed[-1].cookie, confirmed
    world.swap.serve(world.evil_ca.issue_cert("swap.test"))
    try:
        visit(driver, swap + "?forged")
        assert "swap.test" in wait_blocked(driver)
        seen = len(world.swap.hits)
        visit(driver, swap + "?after")
        assert "swap.test" in wait_blocked(driver)
        after = [h for h in world.swap.hits[seen:] if h.path == "/?after"]
        assert after and all(h.cookie == "" for h in after), after
    finally:
        assert world.swap_cert is not None
        world.swap.serve(world.swap_cert)


def test_a_page_with_200_host_names_does_not_fail_a_genuine_site(
    world: World, browser: tuple[Any, str]
) -> None:
    driver, ext_uuid = browser
    _, good = urls(world)
    many = f"https://many.test:{world.many.port}/many?200:{world.many.port}"
    for budget, label in ((8, "budget"), (0, "no budget")):
        set_number(driver, ext_uuid, "query-rate", budget)
        forget(driver, ext_uuid)
        limited = sum(n.rate_limited() for n in world.notaries)
        fresh_tab(driver)
        t0 = time.monotonic()
        driver.execute_script("location.href = arguments[0]", many)  # not waiting for it
        time.sleep(1.0)  # its images are queued by now
        driver.switch_to.new_window("tab")
        t1 = time.monotonic()
        with contextlib.suppress(WebDriverException):
            driver.get(good + "?while-many")
        WebDriverWait(driver, 40).until(
            lambda d: "genuine good.test" in page_text(d) or "moz-extension" in d.current_url
        )
        genuine_s = time.monotonic() - t1
        if "genuine good.test" not in page_text(driver):
            driver.save_screenshot(str(ARTIFACTS / f"200-names-{budget}-failed.png"))
        assert "genuine good.test" in page_text(driver), (label, page_text(driver))
        driver.switch_to.window(driver.window_handles[0])
        WebDriverWait(driver, 120).until(
            lambda d: d.execute_script(
                "return document.readyState === 'complete' && document.images.length === 200"
                " && [...document.images].every(i => i.complete)"
            )
        )
        loaded = driver.execute_script(
            "return [...document.images].filter(i => i.naturalWidth > 0).length"
        )
        refused = sum(n.rate_limited() for n in world.notaries) - limited
        if loaded < 200:
            with contextlib.suppress(WebDriverException):
                popup(driver, ext_uuid, many, expect="many.test")
                print("not loaded:", driver.find_element(By.ID, "popup-others").text)
        print(
            f"200 host names, {label}: genuine page in {genuine_s:.1f} s, "
            f"{loaded}/200 images in {time.monotonic() - t0:.1f} s, {refused:.0f} answers 429"
        )
        # (images whose notaries did not answer within 5 s on this shared machine fail closed;
        # their count is printed, not asserted)
        if budget:
            assert refused == 0
        else:
            assert refused > 0  # twin: without the budget the notaries' limits do bite


def test_own_cache_writes_do_not_reload(world: World, browser: tuple[Any, str]) -> None:
    driver, ext_uuid = browser
    _, good = urls(world)
    settle(driver, ext_uuid)
    forget(driver, ext_uuid)
    loads, entries = stats(driver, ext_uuid)
    visit(driver, good + "?cache-write")
    time.sleep(1.5)  # the cache is written 0.5 s after a confirmation
    loads2, entries2 = stats(driver, ext_uuid)
    assert entries2 > entries and loads2 == loads
    # twin: a settings change does reload
    set_number(driver, ext_uuid, "cache-entries", 4000)
    time.sleep(0.5)
    assert stats(driver, ext_uuid)[0] == loads + 1


def test_replayed_unreachable_cached(world: World, browser: tuple[Any, str]) -> None:
    driver, ext_uuid = browser
    bank, good = urls(world)
    settle(driver, ext_uuid)
    forget(driver, ext_uuid)
    # a genuine site asks the notaries once; then a cached verdict asks none
    before = sum(n.requests_answered() for n in world.notaries)
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
    assert sum(n.requests_answered() for n in world.notaries) - before >= 1
    before = sum(n.requests_answered() for n in world.notaries)
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
    assert sum(n.requests_answered() for n in world.notaries) == before

    # trusting a blocked certificate needs the explicit confirmation first
    visit(driver, bank)
    wait_blocked(driver)
    assert not driver.find_element(By.ID, "trust-once").is_enabled()
    driver.find_element(By.ID, "confirm-risk").click()
    driver.find_element(By.ID, "trust-once").click()
    WebDriverWait(driver, 20).until(lambda d: "forged bank.test" in page_text(d))

    # a replayed answer is not counted: only the replaying relay enabled
    import_bundles(driver, ext_uuid, [world.replay_bundle])
    set_enabled(driver, ext_uuid, {"Org Replay"})
    visit(driver, good)
    assert "good.test" in wait_blocked(driver)
    assert "replayed answer (not counted)" in page_text(driver)
    driver.save_screenshot(str(ARTIFACTS / "block-page-replayed-answer.png"))

    # notaries unreachable: fail closed, and said so
    import_bundles(driver, ext_uuid, [world.dead_bundle])
    set_enabled(driver, ext_uuid, {"Org Dead"})
    visit(driver, good)
    assert "notaries unreachable" in wait_blocked(driver)
    driver.save_screenshot(str(ARTIFACTS / "block-page-notaries-unreachable.png"))
    assert "notaries unreachable" in popup(driver, ext_uuid, good)
    driver.save_screenshot(str(ARTIFACTS / "popup-notaries-unreachable.png"))

    # the honest notaries back: the genuine site loads again (twin of both)
    set_enabled(driver, ext_uuid, {"Org A", "Org B"})
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)


def test_readme_install_on_a_fresh_profile(world: World) -> None:
    """The README's install: the .xpi installed for good (not temporarily) in Firefox ESR with
    xpinstall.signatures.required false; twin: refused while signatures are required."""
    profile, _ = make_profile(world, {"xpinstall.signatures.required": True})
    driver = firefox(profile)
    try:
        with pytest.raises(WebDriverException):
            driver.install_addon(str(XPI))
        set_prefs(driver, {"xpinstall.signatures.required": False})
        before = set(driver.window_handles)
        driver.install_addon(str(XPI))
        WebDriverWait(driver, 15).until(lambda d: len(set(d.window_handles) - before) >= 1)
        driver.switch_to.window(next(iter(set(driver.window_handles) - before)))
        WebDriverWait(driver, 10).until(lambda d: "first-run" in d.current_url)
        WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "first-run").is_displayed())
    finally:
        driver.quit()


def test_http3(world: World) -> None:
    """HTTP/3 (QUIC over UDP, an aioquic server): Firefox told that bank.test and good.test
    speak HTTP/3 on their ports (network.http.http3.alt-svc-mapping-for-testing, as an
    Alt-Svc header would). Without the extension the forgery loads over HTTP/3 (the twin);
    with it, a genuine site loads over HTTP/3 and the forgery is blocked, its request without
    the cookie the browser holds for bank.test."""
    assert world.h3_forged is not None and world.h3_good is not None
    bank = f"https://bank.test:{world.h3_forged.port}/"
    good = f"https://good.test:{world.h3_good.port}/"
    profile, ext_uuid = make_profile(
        world,
        {
            "network.http.http3.enable": True,
            # the test CAs are roots added to the profile, which otherwise turns HTTP/3 off
            "network.http.http3.disable_when_third_party_roots_found": False,
            "network.http.http3.alt-svc-mapping-for-testing": (
                f"bank.test;h3=:{world.h3_forged.port},good.test;h3=:{world.h3_good.port}"
            ),
        },
    )
    driver = firefox(profile)
    try:
        visit(driver, bank + "setcookie")
        visit(driver, bank + "before")
        assert "forged bank.test over HTTP/3" in page_text(driver)
        before = [line for line in world.h3_forged.log() if "/before" in line]
        assert before and before[-1] == "GET /before cookie:yes 3", before
        driver.install_addon(str(XPI), temporary=True)
        time.sleep(1.0)
        import_bundles(driver, ext_uuid, [n.bundle for n in world.notaries])
        visit(driver, good + "over-h3")
        assert "genuine good.test over HTTP/3" in page_text(driver)
        visit(driver, bank + "over-h3")
        assert "bank.test" in wait_blocked(driver)
        over = [line for line in world.h3_forged.log() if "/over-h3" in line]
        assert over and all(line == "GET /over-h3 cookie:no 3" for line in over), over
        driver.save_screenshot(str(ARTIFACTS / "block-page-http3.png"))
    finally:
        driver.quit()
