"""The package's shape: no import cycle (function-local imports included) and layers that only
import downwards, read from the source with ``ast`` (see ARCHITECTURE.md, "Layers")."""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ragbench"

# A module may import its own layer and lower ones (ARCHITECTURE.md).
LAYERS = {
    "ragbench": 0,
    "types": 0,
    "errors": 0,
    "endpoints": 0,
    "lazy": 0,
    "models": 0,
    "protocols": 0,
    "registry": 0,
    "testing": 0,
    "telemetry": 0,
    "progress": 0,
    "text": 1,
    "llm": 1,
    "data": 2,
    "index": 2,
    "retrieve": 3,
    "evaluate": 3,
    "experiment": 4,
    "report": 5,
    "pipeline": 5,
    "service": 5,
    "optimize": 5,
    "cli": 6,
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Every ragbench module imported anywhere in ``tree`` (not under ``if TYPE_CHECKING``)."""
    found: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        found |= _imports(node, modules)
    return found & modules


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: _imports(ast.parse(path.read_text(encoding="utf-8")), set(files)) - {name}
        for name, path in files.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the list of modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else parts[0]]


def test_the_checker_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    source = "def f():\n    import ragbench.x\nif TYPE_CHECKING:\n    import ragbench.y\n"
    assert _imports(ast.parse(source), {"ragbench.x", "ragbench.y"}) == {"ragbench.x"}


def test_no_import_cycle_in_the_package() -> None:
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_package_has_a_layer_and_imports_only_downwards() -> None:
    graph = _graph()
    upward = [
        f"{source} imports {target}"
        for source, targets in graph.items()
        for target in targets
        if _layer(target) > _layer(source)
    ]
    assert upward == []


def _named(text: str) -> set[str]:
    """The module paths (``retrieve/graph.py``, ``tests/test_x.py``) a page names in code."""
    return set(re.findall(r"`([A-Za-z_][\w/]*\.py)`", text))


def _missing(text: str) -> list[str]:
    """Module paths ``text`` names that are neither in the package nor in the repository."""
    repo = PACKAGE.parent
    return sorted(n for n in _named(text) if not ((PACKAGE / n).is_file() or (repo / n).is_file()))


def test_the_module_map_names_what_exists_and_every_package() -> None:
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert _missing(text) == []
    packages = {str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py")} - {"."}
    unnamed = [p for p in sorted(packages) if not re.search(rf"(?<![\w/]){re.escape(p)}/", text)]
    assert unnamed == []
    # the checks can fail: a module that is gone and a package the page leaves out
    assert _missing("`retrieve/gone.py` and `graph.py`") == ["graph.py", "retrieve/gone.py"]
