"""The ``converge`` command, in-process (``main(argv)``) plus one subprocess run."""

from __future__ import annotations

import io
import json
import os
import socketserver
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from converge.cli import main
from converge_fixtures import FakeNotary, TlsTarget, dead_port


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


@pytest.fixture()
def confdir(tmp_path: Path, notaries: list[FakeNotary]) -> Path:
    d = tmp_path / "conf"
    assert run("--config-dir", str(d), "init")[0] == 0
    cfg = json.loads((d / "converge.config").read_text())
    cfg["early-return"] = False
    (d / "converge.config").write_text(json.dumps(cfg))
    for i, n in enumerate(notaries):
        f = tmp_path / f"org{i}.notary"
        f.write_text(json.dumps(n.bundle(f"Org {i}").to_json()))
        code, out = run("--config-dir", str(d), "notary", "add", str(f))
        assert code == 0 and f"added 'Org {i}'" in out
    return d


def test_check_trusted(confdir: Path, pki: dict[str, Any], target: TlsTarget) -> None:
    code, out = run("--config-dir", str(confdir), "check", f"127.0.0.1:{target.port}")
    assert code == 0, out
    assert "TRUSTED" in out and pki["target"].sha1 in out and pki["target"].sha256 in out
    assert out.count("success") == 3
    code, out = run("--config-dir", str(confdir), "check", f"127.0.0.1:{target.port}", "--json")
    j = json.loads(out)
    assert code == 0 and j["verdict"] is True and j["cache"] is True


def test_check_not_trusted(confdir: Path, pki: dict[str, Any], target: TlsTarget) -> None:
    code, out = run(
        "--config-dir",
        str(confdir),
        "check",
        f"127.0.0.1:{target.port}",
        "--fingerprint",
        pki["forged"].sha1,
    )
    assert code == 1
    assert "NOT TRUSTED" in out and out.count("mismatch") == 3


def test_check_errors(confdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("--config-dir", str(confdir), "check", f"127.0.0.1:{dead_port()}")[0] == 2
    assert "target-io" in capsys.readouterr().err
    assert run("--config-dir", str(confdir), "check", "127.0.0.1:1", "--fingerprint", "zz")[0] == 2
    assert "fingerprint" in capsys.readouterr().err
    assert run("--config-dir", str(confdir / "nope"), "check", "x:1")[0] == 2
    assert "config" in capsys.readouterr().err
    assert run("--config-dir", str(confdir), "check", "a:b")[0] == 2


def test_notary_management(confdir: Path, tmp_path: Path) -> None:
    code, out = run("--config-dir", str(confdir), "notary", "list")
    assert code == 0 and out.count("* Org") == 3
    assert run("--config-dir", str(confdir), "notary", "disable", "Org 1")[0] == 0
    code, out = run("--config-dir", str(confdir), "notary", "list", "--json")
    state = {n["name"]: n["enabled"] for n in json.loads(out)}
    assert state == {"Org 0": True, "Org 1": False, "Org 2": True}
    assert not (confdir / "notaries-enabled" / "org-1.notary").exists()
    assert run("--config-dir", str(confdir), "notary", "enable", "org-1")[0] == 0
    link = confdir / "notaries-enabled" / "org-1.notary"
    assert link.is_symlink() and os.readlink(link) == "../notaries-available/org-1.notary"
    assert run("--config-dir", str(confdir), "notary", "remove", "Org 2")[0] == 0
    code, out = run("--config-dir", str(confdir), "notary", "list", "--json")
    assert [n["name"] for n in json.loads(out)] == ["Org 0", "Org 1"]
    # twins: unknown names and bad bundles are errors
    assert run("--config-dir", str(confdir), "notary", "enable", "Org 9")[0] == 2
    bad = tmp_path / "bad.notary"
    bad.write_text('{"version": 2}')
    assert run("--config-dir", str(confdir), "notary", "add", str(bad))[0] == 2
    assert run("--config-dir", str(confdir), "notary", "add", str(tmp_path / "missing"))[0] == 2


def test_cache_commands(confdir: Path, target: TlsTarget) -> None:
    assert run("--config-dir", str(confdir), "check", f"127.0.0.1:{target.port}")[0] == 0
    code, out = run("--config-dir", str(confdir), "cache", "list", "--json")
    rows = json.loads(out)
    assert code == 0 and {r["location"] for r in rows} == {f"127.0.0.1:{target.port}"}
    assert len(rows) == 2  # SHA-1 and SHA-256 forms
    code, out = run("--config-dir", str(confdir), "cache", "clear", "other.example:443")
    assert code == 0 and "removed 0" in out
    code, out = run("--config-dir", str(confdir), "cache", "clear", f"127.0.0.1:{target.port}")
    assert code == 0 and "removed 2" in out
    assert "0 entries" in run("--config-dir", str(confdir), "cache", "list")[1]


@pytest.fixture()
def bundle_server(
    tmp_path: Path, ca: trustme.CA, notaries: list[FakeNotary]
) -> Iterator[tuple[str, Path, dict[str, Any]]]:
    """An HTTPS server (trustme CA) publishing one bundle (``published`` is what it serves)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    published: dict[str, Any] = {}

    class H(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            body = json.dumps(published).encode()
            try:
                with ctx.wrap_socket(self.request, server_side=True) as s:
                    s.recv(4096)
                    s.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            except (OSError, ssl.SSLError):
                pass

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{srv.server_address[1]}/published.notary"
    published.update(notaries[0].bundle("Published Org").to_json(), bundle_location=url)
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    yield url, cafile, published
    srv.shutdown()
    srv.server_close()


def test_notary_add_url(
    confdir: Path, bundle_server: tuple[str, Path], other_ca: trustme.CA, tmp_path: Path
) -> None:
    url, cafile, _ = bundle_server
    code, out = run("--config-dir", str(confdir), "notary", "add", url, "--cafile", str(cafile))
    assert code == 0 and "Published Org" in out
    # twin: the server's certificate is not from the given CA
    other = tmp_path / "other.pem"
    other_ca.cert_pem.write_to_path(str(other))
    assert run("--config-dir", str(confdir), "notary", "add", url, "--cafile", str(other))[0] == 2
    assert run("--config-dir", str(confdir), "notary", "add", url.replace("https", "http"))[0] == 2


def test_console_script(confdir: Path, target: TlsTarget) -> None:
    exe = Path(sys.executable).parent / "converge"
    if not exe.exists():
        pytest.skip("converge console script not installed in this environment")
    proc = subprocess.run(
        [str(exe), "--config-dir", str(confdir), "check", f"127.0.0.1:{target.port}", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] is True


def test_notary_update(
    confdir: Path,
    bundle_server: tuple[str, Path, dict[str, Any]],
    notaries: list[FakeNotary],
    tmp_path: Path,
) -> None:
    url, cafile, published = bundle_server
    # a local copy that is out of date: other host certificate, same name and location
    stale = {**notaries[1].bundle("Published Org").to_json(), "bundle_location": url}
    f = tmp_path / "stale.notary"
    f.write_text(json.dumps(stale))
    assert run("--config-dir", str(confdir), "notary", "add", str(f), "--disabled")[0] == 0
    code, out = run("--config-dir", str(confdir), "notary", "update", "--cafile", str(cafile))
    assert code == 0 and "Published Org: updated" in out and "Org 0: no bundle_location" in out
    stored = json.loads((confdir / "notaries-available" / "published-org.notary").read_text())
    assert stored["hosts"][0]["certificate"] == published["hosts"][0]["certificate"]
    code, out = run("--config-dir", str(confdir), "notary", "list", "--json")
    assert {n["name"]: n["enabled"] for n in json.loads(out)}["Published Org"] is False
    code, out = run(
        "--config-dir", str(confdir), "notary", "update", "Published Org", "--cafile", str(cafile)
    )
    assert code == 0 and "unchanged" in out
    # twins: a renamed publication and an untrusted server are refused
    published["name"] = "Someone Else"
    code, out = run("--config-dir", str(confdir), "notary", "update", "--cafile", str(cafile))
    assert code == 2 and "not updated (bundle)" in out
    published["name"] = "Published Org"
    code, out = run("--config-dir", str(confdir), "notary", "update")  # system CAs only
    assert code == 2 and "not updated (target-io)" in out
    assert run("--config-dir", str(confdir), "notary", "update", "Nobody")[0] == 2


def test_init_and_add_honour_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notaries: list[FakeNotary]
) -> None:
    """Every command uses one discovery order: --config-dir, $CONVERGE_CONFIG_DIR, user, system."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    env_dir = tmp_path / "from-env"
    monkeypatch.setenv("CONVERGE_CONFIG_DIR", str(env_dir))
    code, out = run("init")
    assert code == 0 and str(env_dir) in out and (env_dir / "converge.config").is_file()
    assert not (home / ".config" / "converge").exists()
    f = tmp_path / "a.notary"
    f.write_text(json.dumps(notaries[0].bundle("Org A").to_json()))
    other = tmp_path / "from-env-2"
    monkeypatch.setenv("CONVERGE_CONFIG_DIR", str(other))  # not created yet: add makes it
    assert run("notary", "add", str(f))[0] == 0
    assert list((other / "notaries-enabled").glob("*.notary"))
    # twin: without the variable, init writes the user's directory
    monkeypatch.delenv("CONVERGE_CONFIG_DIR")
    code, out = run("init")
    assert code == 0 and (home / ".config" / "converge" / "converge.config").is_file()


def test_2014_layout_and_where_it_looked(
    tmp_path: Path, notaries: list[FakeNotary], pki: dict[str, Any], target: TlsTarget,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """notaries-dir pointing at the enabled folder itself (the 2014 libraries' config)."""
    d = tmp_path / "etc-converge"
    (d / "notaries-enabled").mkdir(parents=True)
    (d / "converge.config").write_text(json.dumps(
        {"notaries-dir": str(d / "notaries-enabled") + "/", "early-return": False}))
    code, _ = run("--config-dir", str(d), "check", f"127.0.0.1:{target.port}")
    err = capsys.readouterr().err
    assert code != 0 and "no notaries enabled" in err
    assert f"{d / 'notaries-enabled'}" in err  # says where it looked
    for i, n in enumerate(notaries):
        (d / "notaries-enabled" / f"org{i}.notary").write_text(
            json.dumps(n.bundle(f"Org {i}").to_json()))
    code, out = run("--config-dir", str(d), "notary", "list")
    assert code == 0 and out.count("* Org") == len(notaries)  # "*": enabled
    code, out = run("--config-dir", str(d), "check", f"127.0.0.1:{target.port}")
    assert code == 0 and "TRUSTED" in out, out
