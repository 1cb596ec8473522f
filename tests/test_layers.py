"""The layers of the code, as the README's layout states them: ``interp/`` is grouped into
packages by layer, no module of ``models/``, ``interp/`` or ``kernels/`` imports itself back
through others, ``models`` never imports ``interp`` and ``kernels`` imports neither.

The import graph is read from the source, not from an interpreter: every ``import`` statement
counts, those inside functions (a lazy import is a dependency all the same) and under
``if TYPE_CHECKING:`` too. An import names the deepest module it reaches: ``from interp import
plots`` is ``interp.plots``, ``from interp.tasks import get_task`` is ``interp.tasks`` (the
package's ``__init__``), and importing a module does not count as importing its parent packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "interp", "kernels")
# interp/'s modules outside its packages: the tools each command-line command stands on
MAX_LOOSE_MODULES = 6
# which package may import which: the layers point one way
MAY_IMPORT = {"kernels": set(), "models": {"kernels"}, "interp": {"models", "kernels"}}


def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root`` by its dotted name (a package by its own name)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def deepest_module(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of ``modules`` (None: none is)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the statements of ``tree`` import, anywhere in it."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(deepest_module(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(deepest_module(f"{node.module}.{alias.name}", modules) for alias in node.names)
    return found - {None}


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (itself left out)."""
    modules = module_names(root, packages)
    return {name: imported_modules(ast.parse(path.read_text(), str(path)), modules) - {name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """An import cycle of ``graph`` as the path ``[a, b, ..., a]``, or None: a depth-first walk
    that stops at the first edge back to a module still on its path."""
    finished: set[str] = set()
    path: list[str] = []

    def walk(module: str) -> list[str] | None:
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported in path:
                return path[path.index(imported):] + [imported]
            if imported not in finished:
                cycle = walk(imported)
                if cycle:
                    return cycle
        path.pop()
        finished.add(module)
        return None

    for module in sorted(graph):
        if module not in finished:
            cycle = walk(module)
            if cycle:
                return cycle
    return None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of ``graph`` from one package into another that :data:`MAY_IMPORT` does not allow."""
    def package(module: str) -> str:
        return module.partition(".")[0]

    return [f"{module} imports {imported}" for module, imports in sorted(graph.items()) for imported in sorted(imports)
            if package(imported) not in {package(module), *MAY_IMPORT[package(module)]}]


def test_interp_is_grouped_into_packages():
    loose = sorted(path.name for path in (ROOT / "interp").glob("*.py") if path.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_MODULES, f"interp/ has {len(loose)} modules outside packages: {', '.join(loose)}"


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_layers_point_one_way():
    wrong = layer_violations(import_graph())
    assert not wrong, "; ".join(wrong)


def test_the_checks_fail_on_a_cycle_through_a_lazy_import_and_on_a_layer_skipped(tmp_path):
    """A synthetic package: ``a`` imports ``b`` at the top, ``b`` imports ``a.c`` inside a function."""
    package = tmp_path / "pkg"
    (package / "a").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a" / "__init__.py").write_text("from pkg import b\n")
    (package / "a" / "c.py").write_text("X = 1\n")
    (package / "b.py").write_text("def late():\n    from pkg.a.c import X\n    return X\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.a.c": set(), "pkg.b": {"pkg.a.c"}}
    assert find_cycle(graph) is None   # pkg.a -> pkg.b -> pkg.a.c is a chain: a parent package is no import
    (package / "a" / "c.py").write_text("from pkg import b\n")
    assert find_cycle(import_graph(tmp_path, ("pkg",))) == ["pkg.b", "pkg.a.c", "pkg.b"]
    assert layer_violations({"kernels.tooling.rows": {"models.config"}, "models.lens": {"interp.metrics", "kernels.tooling.rows"}}) \
        == ["kernels.tooling.rows imports models.config", "models.lens imports interp.metrics"]
