"""``make run`` on a fresh machine prints nothing before the pin: installing the project
(editable, as the Makefile does) emits no warning from the build backend."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _project_copy(dst: Path) -> Path:
    dst.mkdir()
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    shutil.copy(ROOT / "README.md", dst / "README.md")
    for pkg in ("notary", "replay"):
        shutil.copytree(ROOT / pkg, dst / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _editable_install_stderr(project: Path, venv: Path) -> str:
    # The Makefile upgrades pip before installing; recent pips show the backend's warnings,
    # so the project's own (upgraded) pip installs into a throw-away environment.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
         "--no-deps", "--disable-pip-version-check", "-e", str(project)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.slow
def test_editable_install_prints_no_warning(tmp_path: Path) -> None:
    err = _editable_install_stderr(_project_copy(tmp_path / "p"), tmp_path / "venv")
    assert err.strip() == "", err


@pytest.mark.slow
def test_twin_the_check_sees_the_backend_warning(tmp_path: Path) -> None:
    # Without package-dir, setuptools picks its meta-path finder and warns about folders of
    # the same name as the package: the check above would report it.
    project = _project_copy(tmp_path / "p")
    toml = project / "pyproject.toml"
    text = toml.read_text()
    assert 'package-dir = {"" = "."}' in text
    toml.write_text(text.replace('package-dir = {"" = "."}', ""))
    err = _editable_install_stderr(project, tmp_path / "venv")
    assert "Editable installation" in err or "warning" in err.lower(), err
