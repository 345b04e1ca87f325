"""Cross-origin requests of a confirmed page, in a real headless Firefox (a browser and a
world of their own, firefox_env.py).

A page on good.test (confirmed) makes credentialed cross-origin requests: fetch(), XHR, a
CORS preflight (a PUT with a custom header) and a service worker's fetch, to names of
many.test (genuine, not yet confirmed in this session: each name is a host:port of its own)
and to bank.test (a forgery by a compromised CA). The browser holds a cookie for both,
set by a cross-origin response before the extension was installed (in good.test's cookie
partition, where the page's cross-site requests find it). Without the extension the forgery
gets the cookie and the body (the twin of everything after); with it, a genuine site's
response reaches the page, its request sent without the cookie and then once more with it,
after its certificate was confirmed; the forgery's requests fail and carry no cookie.
"""

from __future__ import annotations

import time
from typing import Any

from firefox_env import XPI, World
from test_firefox import (
    IMG,
    forget,
    import_bundles,
    probe,
    pytestmark,
    visit,
    wait_blocked,
)

__all__ = ["pytestmark"]  # Firefox and certutil installed; the time limit

# the page's requests: each settles with a string, or "timeout" after 30 s (left hanging)
_SETTLE = "const t = setTimeout(() => done('timeout'), 30000);"
_END = (
    ".then((r) => r.text().then((b) => { clearTimeout(t);"
    " done('ok ' + r.status + (b.includes(args[1]) ? ' body' : ' no body')); }),"
    " (e) => { clearTimeout(t); done('error ' + e.name); });"
)
FETCH = _SETTLE + "fetch(args[0], {credentials: 'include', cache: 'no-store'})" + _END
PUT = (
    _SETTLE + "fetch(args[0], {method: 'PUT', credentials: 'include', cache: 'no-store',"
    " headers: {'X-Converge-Test': '1'}, body: 'secret-payload'})" + _END
)
TOGETHER = (
    _SETTLE + "Promise.all([0, 1, 2].map((k) => fetch(args[0] + k,"
    " {credentials: 'include', cache: 'no-store'}).then((r) => r.text()"
    ".then((b) => 'ok ' + r.status + (b.includes('many') ? ' body' : ' no body')))))"
    ".then((all) => { clearTimeout(t); done(all.join(',')); },"
    " (e) => { clearTimeout(t); done('error ' + e.name); });"
)
CUSTOM = (
    _SETTLE + "fetch(args[0], {credentials: 'include', cache: 'no-store',"
    " headers: {'X-Converge-Test': '1'}})" + _END
)
XHR = (
    _SETTLE + "const x = new XMLHttpRequest(); x.open('GET', args[0]); x.withCredentials = true;"
    "x.onload = () => { clearTimeout(t);"
    " done('ok ' + x.status + (x.responseText.includes(args[1]) ? ' body' : ' no body')); };"
    "x.onerror = () => { clearTimeout(t); done('error'); }; x.send();"
)
SW = (
    _SETTLE + "navigator.serviceWorker.register('/sw.js')"
    ".then(() => navigator.serviceWorker.ready).then((reg) => {"
    "  navigator.serviceWorker.onmessage = (e) => { clearTimeout(t); done(e.data); };"
    "  reg.active.postMessage({url: args[0], init: {credentials: 'include'}}); })"
    ".catch((e) => { clearTimeout(t); done('register failed ' + e); });"
)


def run(driver: Any, script: str, url: str, expect_text: str = "") -> str:
    driver.set_script_timeout(60)
    return str(
        driver.execute_async_script(
            "const done = arguments[arguments.length - 1]; const args = arguments;" + script,
            url,
            expect_text,
        )
    )


def genuine(world: World, i: int) -> str:
    """A genuine site's origin not confirmed yet: a name of its own on the many.test server."""
    return f"https://{world.many_names[i]}:{world.many.port}/"


def hits_of(world: World, i: int, path: str) -> list[Any]:
    name = f"{world.many_names[i]}:{world.many.port}"
    return [h for h in world.many.hits if h.host == name and h.path == path]


def forged(world: World) -> str:
    return f"https://bank.test:{world.bank_forged.port}/"


def test_without_the_extension_cross_origin_requests_carry_the_secrets(
    world: World, browser: tuple[Any, str]
) -> None:
    """The twin: the browser alone sends the forgery the cookie with a credentialed fetch,
    and the body of a preflighted PUT."""
    driver, _ = browser
    good = f"https://good.test:{world.good.port}/"
    visit(driver, good)
    # the cookies, set by cross-origin responses (good.test's partition)
    assert run(driver, FETCH, genuine(world, 0) + "setcookie?domain=many.test") == "ok 200 body"
    assert run(driver, FETCH, forged(world) + "setcookie") == "ok 200 body"
    seen = len(world.bank_forged.hits)
    assert run(driver, FETCH, forged(world) + "before", "forged bank.test") == "ok 200 body"
    assert run(driver, PUT, forged(world) + "before-put", "posted") == "ok 200 body"
    got = world.bank_forged.hits[seen:]
    assert any(h.path == "/before" and "SECRET-SESSION" in h.cookie for h in got), got
    puts = [h for h in got if h.method == "PUT"]
    assert puts and puts[0].body == b"secret-payload" and "SECRET-SESSION" in puts[0].cookie
    assert any(h.method == "OPTIONS" for h in got), got  # it was preflighted
    # the genuine name, credentialed, gets its cookie at once (nothing holds it back)
    assert run(driver, FETCH, genuine(world, 9) + "before", "many") == "ok 200 body"
    assert [bool(h.cookie) for h in hits_of(world, 9, "/before")] == [True]


def test_install(world: World, browser: tuple[Any, str]) -> None:
    driver, ext_uuid = browser
    driver.install_addon(str(XPI), temporary=True)
    time.sleep(1.0)
    import_bundles(driver, ext_uuid, [n.bundle for n in world.notaries])
    forget(driver, ext_uuid)


def test_fetch_and_xhr_to_a_genuine_site_arrive_sent_again_with_the_cookie(
    world: World, browser: tuple[Any, str]
) -> None:
    driver, _ = browser
    visit(driver, f"https://good.test:{world.good.port}/")
    for i, script, path in ((1, FETCH, "/cors-fetch"), (2, XHR, "/cors-xhr")):
        assert run(driver, script, genuine(world, i) + path[1:], "many") == "ok 200 body", path
        # once without the cookie (not confirmed), then, confirmed, once more with it
        assert [bool(h.cookie) for h in hits_of(world, i, path)] == [False, True], path
    # confirmed now: the next request goes with the cookie, once
    assert run(driver, FETCH, genuine(world, 1) + "again", "many") == "ok 200 body"
    assert [bool(h.cookie) for h in hits_of(world, 1, "/again")] == [True]
    # three at once to a site not confirmed: each arrives, each ends with its cookie
    said = run(driver, TOGETHER, genuine(world, 6) + "together-")
    assert said == "ok 200 body,ok 200 body,ok 200 body", said
    for k in range(3):
        got = [bool(h.cookie) for h in hits_of(world, 6, f"/together-{k}")]
        assert got[-1] and got.count(True) == 1, (k, got)


def test_fetch_and_xhr_to_the_forgery_fail_without_the_cookie(
    world: World, browser: tuple[Any, str]
) -> None:
    driver, _ = browser
    visit(driver, f"https://good.test:{world.good.port}/")
    seen = len(world.bank_forged.hits)
    assert run(driver, FETCH, forged(world) + "cors-fetch", "bank").startswith("error")
    assert run(driver, XHR, forged(world) + "cors-xhr", "bank") == "error"
    got = world.bank_forged.hits[seen:]
    assert {h.path for h in got} == {"/cors-fetch", "/cors-xhr"}, got
    assert all(h.cookie == "" for h in got), got


def until(what: Any, timeout: float = 20.0) -> Any:
    """Polls `what()` until it is truthy (the extension's own HEAD is sent after the page's
    request failed)."""
    deadline = time.monotonic() + timeout
    while not (got := what()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_preflighted_requests(world: World, browser: tuple[Any, str]) -> None:
    """Requests that need a CORS preflight. A GET with a custom header: the preflight
    (OPTIONS, never with credentials) is checked like any request; to the forgery it fails and
    the GET is not sent; to a genuine site, the preflight's response confirms it, the GET goes
    without its cookie (decided before) and is sent once more, with it. A PUT with a body to a
    site not confirmed is not sent at all (no preflight, no body): the page's fetch fails at
    once, the extension's credential-less HEAD learns the certificate; sent again to the genuine
    site (now confirmed), it goes."""
    driver, _ = browser
    visit(driver, f"https://good.test:{world.good.port}/")
    seen = len(world.bank_forged.hits)
    assert run(driver, CUSTOM, forged(world) + "cors-custom", "bank").startswith("error")
    assert run(driver, PUT, forged(world) + "cors-put", "posted").startswith("error")
    until(lambda: [h for h in world.bank_forged.hits[seen:] if h.method == "HEAD"])
    got = world.bank_forged.hits[seen:]
    assert [h.method for h in got if h.path == "/cors-custom"] == ["OPTIONS"], got
    assert all(h.method in ("OPTIONS", "HEAD") and h.cookie == "" for h in got), got
    assert any(h.method == "HEAD" for h in got), got
    # twin: a genuine site
    said = run(driver, CUSTOM, genuine(world, 3) + "cors-custom", "many")
    got = hits_of(world, 3, "/cors-custom")
    # the GET's headers were decided before its preflight confirmed the site: it went without
    # the cookie, and is sent again (preflighted again: a preflight never has credentials)
    assert [(h.method, bool(h.cookie)) for h in got] == [
        ("OPTIONS", False),
        ("GET", False),
        ("OPTIONS", False),
        ("GET", True),
    ], got
    assert said == "ok 200 body", said
    assert run(driver, PUT, genuine(world, 5) + "cors-put", "posted").startswith("error")
    assert until(lambda: [h for h in world.many.hits if h.method == "HEAD"])
    assert hits_of(world, 5, "/cors-put") == []
    # the HEAD has reached the site; the extension confirms it once its notaries have
    # answered, so the PUT is tried again until then (an attempt before it sends nothing:
    # the hits below are one preflight and one PUT)
    said = ""
    deadline = time.monotonic() + 20.0
    while said != "ok 200 body" and time.monotonic() < deadline:
        said = run(driver, PUT, genuine(world, 5) + "cors-put", "posted")
        if said != "ok 200 body":
            time.sleep(0.2)
    assert said == "ok 200 body", said
    got = hits_of(world, 5, "/cors-put")
    assert [(h.method, bool(h.cookie)) for h in got] == [("OPTIONS", False), ("PUT", True)], got
    assert got[1].body == b"secret-payload"


def test_a_service_workers_cross_origin_fetch(world: World, browser: tuple[Any, str]) -> None:
    driver, _ = browser
    visit(driver, f"https://good.test:{world.good.port}/")
    assert run(driver, SW, genuine(world, 4) + "from-sw") == "ok 200"
    assert [bool(h.cookie) for h in hits_of(world, 4, "/from-sw")] == [False, True]
    seen = len(world.bank_forged.hits)
    assert run(driver, SW, forged(world) + "from-sw").startswith("error")
    got = world.bank_forged.hits[seen:]
    assert got and all(h.cookie == "" for h in got), got


def badge_of(driver: Any, ext_uuid: str, url: str) -> list[str]:
    """The toolbar badge text of the tabs showing `url` (asked from the options page)."""
    page = driver.current_window_handle
    driver.switch_to.new_window("tab")
    driver.get(f"moz-extension://{ext_uuid}/options.html")
    driver.set_script_timeout(10)
    got = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "browser.tabs.query({}).then((ts) => Promise.all(ts.filter((t) => t.url === arguments[0])"
        "  .map((t) => browser.browserAction.getBadgeText({tabId: t.id})))).then(done);",
        url,
    )
    driver.close()
    driver.switch_to.window(page)
    return list(got)


def test_the_badge_shows_a_tabs_problem(world: World, browser: tuple[Any, str]) -> None:
    """Firefox clears a tab's badge when it navigates (after the page's response was checked):
    the block page's tab shows "!", a page with a forged image shows "!" once the image is
    refused; twin: a confirmed page's tab shows none."""
    driver, ext_uuid = browser
    good = f"https://good.test:{world.good.port}/"
    visit(driver, forged(world) + "badge")
    wait_blocked(driver)
    assert badge_of(driver, ext_uuid, driver.current_url) == ["!"]
    visit(driver, good + "badge")
    assert badge_of(driver, ext_uuid, good + "badge") == [""]
    assert probe(driver, IMG, forged(world) + "img.gif") == "error"
    assert badge_of(driver, ext_uuid, good + "badge") == ["!"]
