import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from firefox_env import ARTIFACTS, XPI, World, firefox, make_profile, start_world  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # the browser leaves keep-alive TLS connections to the test sites open; their sockets are
    # collected after the servers stop, which Python reports as unraisable ResourceWarnings
    config.addinivalue_line("filterwarnings", "ignore::pytest.PytestUnraisableExceptionWarning")
    config.addinivalue_line("filterwarnings", "ignore::ResourceWarning")


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
