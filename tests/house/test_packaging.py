"""The notary's distribution and image carry what the service imports, and nothing else.

* every third-party module imported under ``notary/`` is a declared runtime dependency, and
  every declared runtime dependency is imported there (plotting and dataframe libraries,
  used only by ``replay/``, sit in the ``replay`` extra);
* every runtime dependency is pinned in ``deploy/constraints.txt``, which the image installs
  with; the image's ``notary`` stage copies only ``notary/``;
* the installed metadata agrees: ``pip install .`` pulls no matplotlib or polars.

The twins run the same checks on a small synthetic project that breaks each rule.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
STUDY_ONLY = {"matplotlib", "polars", "publicsuffixlist"}


def third_party_imports(package: Path) -> set[str]:
    """Top-level names of the modules imported under ``package`` that are not the standard
    library's nor the package's own (absolute imports; relative ones are the package's)."""
    own = package.name
    found: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top != own and top not in sys.stdlib_module_names and top != "__future__":
                    found.add(top)
    return found


def distribution_of(module: str) -> str:
    dists = packages_distributions().get(module)
    return canonicalize_name(dists[0] if dists else module)


def service_problems(pyproject: dict[str, object], package: Path, constraints: str,
                     dockerfile: str) -> list[str]:
    out: list[str] = []
    project = pyproject["project"]
    assert isinstance(project, dict)
    declared = {canonicalize_name(Requirement(r).name): Requirement(r)
                for r in project.get("dependencies", [])}
    imported = {distribution_of(m) for m in third_party_imports(package)}
    for name in sorted(imported - set(declared)):
        out.append(f"{package.name}/ imports {name}, which is not a runtime dependency")
    for name in sorted(set(declared) - imported):
        out.append(f"runtime dependency {name} is not imported by {package.name}/")
    for name in sorted(set(declared) & STUDY_ONLY):
        out.append(f"runtime dependency {name} belongs in an extra")
    pinned = {canonicalize_name(m.group(1)) for m in re.finditer(
        r"^([A-Za-z0-9._-]+)==\S+", constraints, re.M)}
    for name in sorted(set(declared) - pinned):
        out.append(f"runtime dependency {name} is not pinned in the constraints file")
    stage = dockerfile.split(" AS notary", 1)[-1].split("\nFROM ", 1)[0]
    if re.search(r"^COPY\s+(?!notary\b)\S*\b(replay|bench|tests)\b", stage, re.M):
        out.append("the notary image copies more than the service")
    if not re.search(r"pip install[^\n]*--constraint", stage):
        out.append("the notary image installs without the constraints file")
    return out


def load() -> tuple[dict[str, object], Path, str, str]:
    return (tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8")),
            ROOT / "notary", (ROOT / "deploy" / "constraints.txt").read_text(encoding="utf-8"),
            (ROOT / "Dockerfile").read_text(encoding="utf-8"))


def test_the_service_declares_exactly_what_it_imports() -> None:
    assert service_problems(*load()) == []


def test_study_libraries_are_an_extra_of_the_installed_distribution() -> None:
    runtime, extras = set(), set()
    for text in requires("converge-notary") or []:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if req.marker is not None and "extra" in str(req.marker):
            extras.add(name)
        else:
            runtime.add(name)
    assert not runtime & STUDY_ONLY, runtime
    assert extras >= STUDY_ONLY, extras


def test_twin_a_project_breaking_each_rule_is_caught(tmp_path: Path) -> None:
    package = tmp_path / "notary"
    package.mkdir()
    (package / "a.py").write_text("import yaml\nimport json\nfrom . import b\n",
                                  encoding="utf-8")
    pyproject = {"project": {"dependencies": ["matplotlib>=3", "aiohttp>=3"]}}
    dockerfile = ("FROM python:3.11-slim AS notary\nCOPY notary ./notary\nCOPY replay ./replay\n"
                  "RUN pip install .\nFROM notary AS locust\n")
    found = service_problems(pyproject, package, "aiohttp==3.0\n", dockerfile)
    assert found == [
        "notary/ imports pyyaml, which is not a runtime dependency",
        "runtime dependency aiohttp is not imported by notary/",
        "runtime dependency matplotlib is not imported by notary/",
        "runtime dependency matplotlib belongs in an extra",
        "runtime dependency matplotlib is not pinned in the constraints file",
        "the notary image copies more than the service",
        "the notary image installs without the constraints file",
    ], found
