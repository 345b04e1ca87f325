"""The extension in a real, headless Firefox (firefox_env.py sets up the world).

(a) a genuine site that the notaries see the same way loads; (b) a compromised CA: the
profile trusts the attacker's CA and the browser reaches the attacker's server while the
notaries reach the genuine one: blocked, and the block page says why; (c) notaries
unreachable: fail closed, said so; (d) a cached verdict asks no notary (counted at the
notaries); (e) a replayed notary answer is not counted. Screenshots of the block page and
the popup go to var/results/webextension/.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("selenium")
from firefox_env import ARTIFACTS, EXT, World, firefox, make_profile, start_world  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

XPI = EXT / "dist" / "converge-0.1.0.xpi"
pytestmark = [
    pytest.mark.skipif(
        shutil.which("firefox-esr") is None and shutil.which("firefox") is None,
        reason="Firefox not installed (scripts/install-system-deps)",
    ),
    pytest.mark.skipif(shutil.which("certutil") is None, reason="certutil not installed"),
    pytest.mark.timeout(600),
]


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    if not XPI.exists():
        pytest.fail(f"{XPI} not built (client-libs/webextension/test.sh builds it)")
    w = start_world()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield w
    w.close()


@pytest.fixture(scope="module")
def browser(world: World) -> Iterator[tuple[Any, str]]:
    profile, ext_uuid = make_profile(world)
    driver = firefox(profile)
    yield driver, ext_uuid
    driver.quit()


def page_text(driver: Any) -> str:
    return str(driver.find_element(By.TAG_NAME, "body").text)


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
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "import-bundle"))


def popup(driver: Any, ext_uuid: str, site: str) -> str:
    """The popup's view of the tab showing `site`, in a tab of its own."""
    driver.switch_to.new_window("tab")
    driver.get(f"moz-extension://{ext_uuid}/popup.html?for={site}")
    WebDriverWait(driver, 10).until(
        lambda d: site.split("/")[2].split(":")[0] in d.find_element(By.ID, "popup-verdict").text
    )
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
    driver.find_element(By.ID, "forget-cache").click()
    time.sleep(0.5)


def test_the_whole_story(world: World, browser: tuple[Any, str]) -> None:
    driver, ext_uuid = browser
    bank = f"https://bank.test:{world.bank_forged.port}/"
    good = f"https://good.test:{world.good.port}/"

    # twin of (b): without the extension the browser accepts the forgery (its CA is trusted)
    visit(driver, bank)
    assert "forged bank.test" in page_text(driver)

    driver.install_addon(str(XPI), temporary=True)
    import_bundles(driver, ext_uuid, [n.bundle for n in world.notaries])
    # private-address exemption: on by default; every site here is on loopback
    assert driver.find_element(By.ID, "exempt-private").is_selected()
    visit(driver, bank)
    assert "forged bank.test" in page_text(driver)  # exempt: not checked (documented)
    options(driver, ext_uuid)
    driver.find_element(By.ID, "exempt-private").click()
    driver.find_element(By.ID, "policy").send_keys("consensus")
    time.sleep(0.5)

    # (a) the genuine site loads
    before = sum(n.requests_answered() for n in world.notaries)
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
    asked = sum(n.requests_answered() for n in world.notaries) - before
    assert asked >= 1

    # (d) again: a cached verdict, no notary asked
    before = sum(n.requests_answered() for n in world.notaries)
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
    assert sum(n.requests_answered() for n in world.notaries) == before

    # the popup for that tab
    assert "trusted" in popup(driver, ext_uuid, good)
    driver.save_screenshot(str(ARTIFACTS / "popup-trusted.png"))

    # (b) the compromised CA: blocked before the page gets the response, and said why
    hits = len(world.bank_forged.hits)
    visit(driver, bank)
    text = wait_blocked(driver)
    assert "untrusted" in text and "bank.test" in text
    body = page_text(driver)
    assert "sees a different certificate" in body and "Org A" in body and "Org B" in body
    driver.save_screenshot(str(ARTIFACTS / "block-page-compromised-ca.png"))
    assert len(world.bank_forged.hits) == hits + 1  # the browser asked; the page never got it
    # trusting it needs the explicit confirmation first
    assert not driver.find_element(By.ID, "trust-once").is_enabled()
    driver.find_element(By.ID, "confirm-risk").click()
    driver.find_element(By.ID, "trust-once").click()
    WebDriverWait(driver, 20).until(lambda d: "forged bank.test" in page_text(d))

    # (e) a replayed answer is not counted: only the replaying relay enabled
    import_bundles(driver, ext_uuid, [world.replay_bundle])
    set_enabled(driver, ext_uuid, {"Org Replay"})
    visit(driver, good)
    text = wait_blocked(driver)
    assert "good.test" in text
    assert "replayed answer (not counted)" in page_text(driver)
    driver.save_screenshot(str(ARTIFACTS / "block-page-replayed-answer.png"))

    # (c) notaries unreachable: fail closed, and said so
    import_bundles(driver, ext_uuid, [world.dead_bundle])
    set_enabled(driver, ext_uuid, {"Org Dead"})
    visit(driver, good)
    text = wait_blocked(driver)
    assert "notaries unreachable" in text
    driver.save_screenshot(str(ARTIFACTS / "block-page-notaries-unreachable.png"))
    assert "notaries unreachable" in popup(driver, ext_uuid, good)
    driver.save_screenshot(str(ARTIFACTS / "popup-notaries-unreachable.png"))

    # the honest notaries back: the genuine site loads again (twin of (c) and (e))
    set_enabled(driver, ext_uuid, {"Org A", "Org B"})
    visit(driver, good)
    assert "genuine good.test" in page_text(driver)
