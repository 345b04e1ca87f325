import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config: pytest.Config) -> None:
    # the browser leaves keep-alive TLS connections to the test sites open; their sockets are
    # collected after the servers stop, which Python reports as unraisable ResourceWarnings
    config.addinivalue_line("filterwarnings", "ignore::pytest.PytestUnraisableExceptionWarning")
    config.addinivalue_line("filterwarnings", "ignore::ResourceWarning")
