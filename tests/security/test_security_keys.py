"""Key handling: owner-only key files, refusal to start with readable keys, rotation.

Runs the real CLI (``notary keygen``, ``notary serve``, ``notary bundle``) as processes with a
permissive umask, so the modes are what the code sets, not what the umask allows.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from security_support import REPO, NotaryProcess, Results, copy_identity

SUITE = "key handling"


def notary_cli(*args: str, umask: int = 0o000, timeout: float = 60
               ) -> subprocess.CompletedProcess[str]:
    def set_umask() -> None:
        os.umask(umask)

    return subprocess.run([sys.executable, "-m", "notary.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, preexec_fn=set_umask)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keygen_writes_owner_only_keys_even_with_umask_0(tmp_path: Path,
                                                         results: Results) -> None:
    r = notary_cli("keygen", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    key, signing = tmp_path / "d" / "notary.key", tmp_path / "d" / "signing.key"
    assert mode(key) == 0o600 and mode(signing) == 0o600
    results.add(SUITE, "notary keygen under umask 000", "keys 0600",
                f"notary.key {mode(key):o}, signing.key {mode(signing):o}")


def test_stale_temporary_key_file_does_not_leak_the_key(tmp_path: Path,
                                                        results: Results) -> None:
    """A pre-existing world-readable ``notary.key.tmp`` (or a symlink planted there) must not
    receive the private key or pass its mode on to the key file."""
    d = tmp_path / "d"
    d.mkdir()
    stale = d / "notary.key.tmp"
    stale.write_text("")
    stale.chmod(0o644)
    decoy = tmp_path / "attacker-file"
    decoy.write_text("")
    (d / "signing.key.tmp").symlink_to(decoy)
    r = notary_cli("keygen", "--data-dir", str(d))
    assert r.returncode == 0, r.stderr
    assert mode(d / "notary.key") == 0o600
    assert mode(d / "signing.key") == 0o600
    assert decoy.read_text() == ""  # nothing written through the planted symlink
    results.add(SUITE, "keygen with a stale 0644 notary.key.tmp and a symlinked "
                "signing.key.tmp", "keys 0600; nothing written through the symlink",
                f"notary.key {mode(d / 'notary.key'):o}; symlink target untouched")


@pytest.mark.parametrize(("which", "bad_mode"), [
    ("notary.key", 0o644), ("notary.key", 0o640), ("notary.key", 0o604),
    ("signing.key", 0o644),
])
def test_serve_refuses_keys_readable_by_others(identity_dir: Path, tmp_path: Path,
                                               results: Results, which: str,
                                               bad_mode: int) -> None:
    d = copy_identity(identity_dir, tmp_path / "d")
    (d / which).chmod(bad_mode)
    t0 = time.monotonic()
    r = notary_cli("serve", "--data-dir", str(d), "--listen", "127.0.0.1:0", timeout=30)
    took = time.monotonic() - t0
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "accessible by other users" in r.stderr and "chmod 600" in r.stderr
    results.add(SUITE, f"notary serve with {which} mode {bad_mode:o}",
                "refuses to start (exit 2, says chmod 600)", f"exit {r.returncode}", took)


def test_serve_refuses_a_symlink_to_a_readable_key(identity_dir: Path, tmp_path: Path) -> None:
    d = copy_identity(identity_dir, tmp_path / "d")
    real = tmp_path / "elsewhere.key"
    (d / "notary.key").rename(real)
    real.chmod(0o644)
    (d / "notary.key").symlink_to(real)
    r = notary_cli("serve", "--data-dir", str(d), "--listen", "127.0.0.1:0", timeout=30)
    assert r.returncode == 2 and "accessible by other users" in r.stderr


def test_serve_starts_with_owner_only_keys(identity_dir: Path, tmp_path: Path) -> None:
    """Must-pass twin: the same copy with 0600 keys serves."""
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "d"), [])
    try:
        assert n.alive() and n.port
    finally:
        n.stop()


def test_signing_key_rotation_publishes_a_new_bundle(tmp_path: Path, results: Results) -> None:
    d = tmp_path / "d"
    assert notary_cli("keygen", "--data-dir", str(d)).returncode == 0
    before = json.loads(notary_cli("bundle", "--data-dir", str(d), "--host", "n.example",
                                   "--name", "N").stdout)
    old_id = before["signing_keys"][0]["key_id"]
    r = notary_cli("keygen", "--data-dir", str(d), "--rotate-signing-key")
    assert r.returncode == 0, r.stderr
    assert mode(d / "signing.key") == 0o600
    after = json.loads(notary_cli("bundle", "--data-dir", str(d), "--host", "n.example",
                                  "--name", "N").stdout)
    statuses = {k["key_id"]: k["status"] for k in after["signing_keys"]}
    assert statuses[old_id] == "retired"
    assert [k for k, s in statuses.items() if s == "current"] != [old_id]
    assert after["hosts"] == before["hosts"]  # the TLS pin is unchanged by this rotation
    results.add(SUITE, "signing-key rotation (keygen --rotate-signing-key, then bundle)",
                "new key 0600; bundle lists new current + old retired key",
                f"{len(statuses)} keys in the new bundle; old one retired")
