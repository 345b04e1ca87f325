"""One licence for the whole repository: LICENSE is Apache-2.0 and every package's metadata
says the same. The twin checks that the reader does catch a package that says MIT."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# file -> a pattern whose first group is the licence the package declares
DECLARED = {
    "pyproject.toml": r'^license\s*=\s*"([^"]+)"',
    "client-libs/python/pyproject.toml": r'^license\s*=\s*"([^"]+)"',
    "client-libs/typescript/package.json": r'^  "license":\s*"([^"]+)"',
    "client-libs/webextension/package.json": r'^  "license":\s*"([^"]+)"',
    "client-libs/php/composer.json": r'^    "license":\s*"([^"]+)"',
    "client-libs/rust/Cargo.toml": r'^license\s*=\s*"([^"]+)"',
    "client-libs/ruby/converge.gemspec": r'^\s*s\.license\s*=\s*"([^"]+)"',
    "client-libs/lua/converge-0.1.0-1.rockspec": r'^\s*license\s*=\s*"([^"]+)"',
    "client-libs/perl/Makefile.PL": r"^\s*LICENSE\s*=>\s*'([^']+)'",
    "client-libs/java/pom.xml": r"<license>\s*<name>([^<]+)</name>",
}
SAME = {"Apache-2.0", "apache_2_0", "Apache License, Version 2.0",
        "The Apache License, Version 2.0"}


def declared(text: str, pattern: str) -> str | None:
    found = re.search(pattern, text, re.M)
    return found.group(1) if found else None


def problems(texts: dict[str, str]) -> list[str]:
    out = []
    for path, pattern in DECLARED.items():
        value = declared(texts[path], pattern)
        if value not in SAME:
            out.append(f"{path}: licence {value!r}, not Apache-2.0")
    return out


def test_license_file_is_apache() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert "Version 2.0" in (ROOT / "LICENSE").read_text()[:200]


def test_every_package_says_apache() -> None:
    texts = {p: (ROOT / p).read_text() for p in DECLARED}
    assert problems(texts) == []
    for lock in ("client-libs/typescript/package-lock.json",
                 "client-libs/webextension/package-lock.json"):
        root = json.loads((ROOT / lock).read_text())["packages"][""]
        assert root.get("license") == "Apache-2.0", lock


def test_twin_a_package_that_says_mit_is_caught() -> None:
    texts = {p: (ROOT / p).read_text() for p in DECLARED}
    texts["client-libs/rust/Cargo.toml"] = texts["client-libs/rust/Cargo.toml"].replace(
        'license = "Apache-2.0"', 'license = "MIT"')
    assert problems(texts) == ['client-libs/rust/Cargo.toml: licence \'MIT\', not Apache-2.0']
