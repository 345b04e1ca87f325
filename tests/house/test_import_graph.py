"""The import graph of the whole Python house, read from the source with ``ast``.

* no circles anywhere (notary, replay, bench, loadtests, fuzz, the ``converge`` client);
* inside ``notary/`` every arrow runs down the layers below (an import within a layer is
  allowed; a new module must be placed in a layer);
* ``notary/`` imports nothing from ``replay/`` (the study uses the notary as a library), and
  no plotting or dataframe library.

Every import statement counts, at module level or inside a function (a lazy import is still
an arrow); imports under ``if TYPE_CHECKING:`` do not. Importing ``a.b.c`` is an arrow to
``a.b.c`` only, not to the packages ``a`` and ``a.b`` that Python runs first: a package's
``__init__`` that gathers its own submodules is not a circle. The twins run the checker on
small synthetic packages with a circle, an arrow up and a forbidden import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (directory on sys.path, pattern of the files it contributes)
HOUSE = (
    (ROOT, "notary/**/*.py"),
    (ROOT, "replay/**/*.py"),
    (ROOT, "bench/**/*.py"),
    (ROOT / "loadtests", "*.py"),
    (ROOT / "fuzz", "*.py"),
    (ROOT / "client-libs" / "python" / "src", "converge/**/*.py"),
)

# notary's layers, lowest first: a module may import its own layer and those below
NOTARY_LAYERS: tuple[tuple[str, ...], ...] = (
    ("notary", "notary.errors", "notary.logpolicy", "notary.metrics_aggregate"),
    ("notary.core",),
    ("notary.ca", "notary.store", "notary.tlog"),
    ("notary.resolve", "notary.probe", "notary.keys", "notary.proxyproto"),
    ("notary.limits", "notary.metrics", "notary.relay", "notary.config"),
    ("notary.service",),
    ("notary.web",),
    ("notary.server",),
    ("notary.demo",),
    ("notary.cli",),
)
NOT_IN_NOTARY = ("replay", "matplotlib", "polars", "publicsuffixlist")


def module_files(house: Iterable[tuple[Path, str]]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for base, pattern in house:
        for path in sorted(base.glob(pattern)):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, but those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imports(name: str, path: Path) -> list[str]:
    """The dotted names ``name`` (at ``path``) imports: modules, or names from modules."""
    is_package = path.name == "__init__.py"
    out: list[str] = []
    for node in _statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
            continue
        base = node.module or ""
        if node.level:
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        out += [f"{base}.{a.name}" if base else a.name for a in node.names]
    return out


def resolve(dotted: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``dotted`` names or lies in."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in known:
            return candidate
    return None


def graph(known: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        for dotted in imports(name, path):
            target = resolve(dotted, known)
            if target is not None and target != name:
                edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> int | None:
    """The layer of the longest entry naming ``module`` or a package holding it (a top-level
    name, such as ``notary``, names only its own ``__init__``)."""
    best: tuple[int, int] | None = None  # (entry length, layer)
    for i, entries in enumerate(layers):
        for p in entries:
            holds = "." in p and module.startswith(p + ".")
            if (module == p or holds) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return None if best is None else best[1]


def layer_problems(edges: dict[str, set[str]], top: str,
                   layers: tuple[tuple[str, ...], ...]) -> list[str]:
    out = []
    for module in sorted(m for m in edges if m == top or m.startswith(top + ".")):
        mine = layer_of(module, layers)
        if mine is None:
            out.append(f"{module} is in no layer")
            continue
        for target in sorted(edges[module]):
            theirs = layer_of(target, layers)
            if theirs is not None and theirs > mine:
                out.append(f"{module} -> {target} runs back up")
    return out


def forbidden_imports(known: dict[str, Path], top: str, names: tuple[str, ...]) -> list[str]:
    out = []
    for module, path in sorted(known.items()):
        if module != top and not module.startswith(top + "."):
            continue
        for dotted in imports(module, path):
            first = dotted.split(".")[0]
            if first in names:
                out.append(f"{module} imports {dotted}")
    return out


def test_the_house_has_no_import_circles() -> None:
    known = module_files(HOUSE)
    assert len(known) > 100  # the walk found the house
    assert cycles(graph(known)) == []


def test_no_arrow_runs_back_up_inside_notary() -> None:
    assert layer_problems(graph(module_files(HOUSE)), "notary", NOTARY_LAYERS) == []


def test_notary_imports_no_study_and_no_plotting_or_dataframes() -> None:
    assert forbidden_imports(module_files(HOUSE), "notary", NOT_IN_NOTARY) == []


def _package(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return module_files([(root, "svc/**/*.py")])


def test_twin_a_circle_an_arrow_up_and_a_forbidden_import_are_reported(tmp_path: Path) -> None:
    known = _package(tmp_path, {
        "svc/__init__.py": "",
        "svc/core/__init__.py": "from svc.core import a\n",  # a package gathering its own
        "svc/core/a.py": "from . import b\n",
        "svc/core/b.py": "def f():\n    from svc.core.a import g  # lazy, still an arrow\n",
        "svc/web.py": "import svc.core.b\n",
        "svc/store.py": "from svc.web import app\nimport matplotlib.pyplot\n",
        "svc/typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                        "    import svc.web\n",
    })
    edges = graph(known)
    assert edges["svc.core.b"] == {"svc.core.a"} and edges["svc.typed"] == set()
    assert cycles(edges) == [["svc.core.a", "svc.core.b"]]
    layers = (("svc", "svc.core"), ("svc.store", "svc.typed"), ("svc.web",))
    assert layer_problems(edges, "svc", layers) == ["svc.store -> svc.web runs back up"]
    assert layer_problems(edges, "svc", layers[:2]) == ["svc.web is in no layer"]
    assert forbidden_imports(known, "svc", ("matplotlib",)) == [
        "svc.store imports matplotlib.pyplot"]
    # and without the circle there is none
    (tmp_path / "svc/core/b.py").write_text("def f():\n    pass\n", encoding="utf-8")
    assert cycles(graph(module_files([(tmp_path, "svc/**/*.py")]))) == []
