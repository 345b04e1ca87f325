"""Vector cases for the configuration directory: both layouts of ``notaries-dir`` and bad
configuration files. Each case is a small file tree (``files``: path -> text, ``links``:
path -> symlink target, both relative to the configuration directory); the runner creates it
in a fresh temporary directory, loads that directory as the configuration and reports the
enabled notaries' names (sorted) or the error kind."""

from __future__ import annotations

import json
from typing import Any

from _common import CERTS, Case, numbered


def _bundle(name: str, host: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "name": name,
            "bundle_location": f"https://{host}/x.notary",
            "hosts": [
                {
                    "host": host,
                    "ssl_port": 443,
                    "http_port": 80,
                    "certificate": CERTS["test-notary"],
                }
            ],
        },
        indent=1,
    )


A = _bundle("Org A", "notary-a.test")
B = _bundle("Org B", "notary-b.test")
C = _bundle("Org C", "notary-c.test")


def config() -> dict[str, Any]:
    cases: list[Case] = [
        {
            "comment": "our layout: notaries-enabled/ links into notaries-available/",
            "flags": ["layout-subfolders"],
            "files": {
                "converge.config": "{}",
                "notaries-available/a.notary": A,
                "notaries-available/b.notary": B,
            },
            "links": {"notaries-enabled/a.notary": "../notaries-available/a.notary"},
            "result": "valid",
            "enabled": ["Org A"],
        },
        {
            "comment": "our layout, no converge.config at all (every key has a default)",
            "flags": ["layout-subfolders"],
            "files": {"notaries-available/a.notary": A, "notaries-available/b.notary": B},
            "links": {
                "notaries-enabled/a.notary": "../notaries-available/a.notary",
                "notaries-enabled/b.notary": "../notaries-available/b.notary",
            },
            "result": "valid",
            "enabled": ["Org A", "Org B"],
        },
        {
            "comment": "our layout: a plain file in notaries-enabled/ is enabled too",
            "flags": ["layout-subfolders"],
            "files": {"notaries-available/a.notary": A, "notaries-enabled/c.notary": C},
            "result": "valid",
            "enabled": ["Org C"],
        },
        {
            "comment": "our layout: a dangling link is ignored",
            "flags": ["layout-subfolders"],
            "files": {"notaries-available/a.notary": A},
            "links": {
                "notaries-enabled/a.notary": "../notaries-available/a.notary",
                "notaries-enabled/gone.notary": "../notaries-available/gone.notary",
            },
            "result": "valid",
            "enabled": ["Org A"],
        },
        {
            "comment": "the 2014 libraries' layout: notaries-dir is the enabled folder itself, "
            "with a trailing slash, holding the bundles as files",
            "flags": ["layout-2014"],
            "files": {
                "converge.config": json.dumps({"notaries-dir": "notaries-enabled/"}),
                "notaries-enabled/a.notary": A,
                "notaries-enabled/b.notary": B,
            },
            "result": "valid",
            "enabled": ["Org A", "Org B"],
        },
        {
            "comment": "the 2014 layout with symlinks to a sibling notaries-available/ "
            "(only the linked ones are enabled)",
            "flags": ["layout-2014"],
            "files": {
                "converge.config": json.dumps({"notaries-dir": "notaries-enabled/"}),
                "notaries-available/a.notary": A,
                "notaries-available/b.notary": B,
                "notaries-available/c.notary": C,
            },
            "links": {
                "notaries-enabled/a.notary": "../notaries-available/a.notary",
                "notaries-enabled/c.notary": "../notaries-available/c.notary",
            },
            "result": "valid",
            "enabled": ["Org A", "Org C"],
        },
        {
            "comment": "the 2014 layout under another name, without a trailing slash",
            "flags": ["layout-2014"],
            "files": {
                "converge.config": json.dumps({"notaries-dir": "enabled"}),
                "enabled/b.notary": B,
            },
            "result": "valid",
            "enabled": ["Org B"],
        },
        {
            "comment": "two files of one logical notary count once",
            "flags": ["layout-2014"],
            "files": {
                "converge.config": json.dumps({"notaries-dir": "notaries-enabled/"}),
                "notaries-enabled/a.notary": A,
                "notaries-enabled/a-copy.notary": A,
            },
            "result": "valid",
            "enabled": ["Org A"],
        },
        {
            "comment": "an empty configuration directory has no notaries (not an error here; "
            "a check then fails saying where it looked)",
            "flags": ["empty"],
            "files": {"converge.config": "{}"},
            "result": "valid",
            "enabled": [],
        },
        {
            "comment": "a bundle that does not parse is an error naming it",
            "flags": ["bad-bundle"],
            "files": {
                "converge.config": json.dumps({"notaries-dir": "notaries-enabled/"}),
                "notaries-enabled/a.notary": A,
                "notaries-enabled/broken.notary": "{}",
            },
            "result": "invalid",
            "error": "bundle",
        },
        {
            "comment": "notaries-dir must be a string",
            "flags": ["bad-config"],
            "files": {"converge.config": json.dumps({"notaries-dir": 7})},
            "result": "invalid",
            "error": "config",
        },
        {
            "comment": "an unknown key is refused",
            "flags": ["bad-config"],
            "files": {"converge.config": json.dumps({"notaries-directory": "x"})},
            "result": "invalid",
            "error": "config",
        },
        {
            "comment": "converge.config must be a JSON object",
            "flags": ["bad-config"],
            "files": {"converge.config": "[1, 2]"},
            "result": "invalid",
            "error": "config",
        },
        {
            "comment": "converge.config that is not JSON",
            "flags": ["bad-config"],
            "files": {"converge.config": "{notaries-dir: x}"},
            "result": "invalid",
            "error": "config",
        },
    ]
    return {
        "schema": "converge-vectors/config/1",
        "description": "The configuration directory: converge.config, and the enabled notaries "
        "under both layouts of notaries-dir. Create 'files' and 'links' (symlink "
        "path -> target) under a fresh directory, load it as the configuration "
        "directory, and output the sorted names of the enabled logical notaries "
        "('enabled'), or the error kind.",
        "notes": {
            "layout-subfolders": "notaries-dir (default '.') holds notaries-available/ and "
            "notaries-enabled/",
            "layout-2014": "notaries-dir names the enabled folder itself (the 2014 client "
            "libraries' converge.config: /usr/local/etc/converge/"
            "notaries-enabled/): every .notary file in it, links followed",
            "empty": "no bundles anywhere",
            "bad-bundle": "error kind 'bundle'",
            "bad-config": "error kind 'config'",
        },
        "tests": numbered(cases),
    }
