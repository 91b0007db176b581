"""The package's shape: no import cycle (function-local imports included), layers that only
import downwards (see ARCHITECTURE.md, "Layers"), stages run by the executor alone, and kinds
named only by themselves — read from the source with ``ast``."""

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
    "api": 5,
    "optimize": 5,
    "ingest": 5,
    "owned": 0,
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


# ---------------------------------------------------------------- the one executor

# Where a stage runs: ``Execution`` computes or loads it, ``LiveExecution`` updates a deployed
# plan's values as documents come and go (ARCHITECTURE.md, "Observability").
EXECUTORS = {"retrieve/execution.py": "Execution", "retrieve/live.py": "LiveExecution"}


_STAGES = re.compile(r"(.*\.)?(stages(\.values\(\))?|index_stages\(\)|live_stages\(.*\))")
_STAGE_NAME = re.compile(r"s|stage|\w*_stage")


def _stage_names(function: ast.AST) -> set[str]:
    """Names bound to a stage in ``function``: parameters annotated ``Stage``, loop and
    comprehension targets over a plan's stages, and ``x = ....stages[...]`` (or ``.get``)."""
    found: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.arg) and node.annotation is not None:
            if ast.unparse(node.annotation) == "Stage":
                found.add(node.arg)
        elif isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
            if _STAGES.fullmatch(ast.unparse(node.iter)):
                found.add(node.target.id)
        elif isinstance(node, ast.Assign) and _is_stage(node.value, set()):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


def _is_stage(node: ast.expr, names: set[str]) -> bool:
    """Whether ``node`` is a stage: a name bound to one (or named as one: ``stage``, ``s``,
    ``..._stage``), ``....stages[...]`` or ``....stages.get(...)``."""
    if isinstance(node, ast.Name):
        return node.id in names or _STAGE_NAME.fullmatch(node.id) is not None
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value).split(".")[-1] == "stages"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and ast.unparse(node.func.value).endswith("stages")
    return False


def _runs_a_stage(call: ast.Call, names: set[str]) -> bool:
    """Whether ``call`` runs a stage: any ``x.compute(...)`` (no other ``compute`` is called
    in the package), and ``x.extend(...)`` where ``x`` is a stage (not a list, whose
    ``extend`` is everywhere, nor an execution, whose ``extend`` runs the stages' own)."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    return func.attr == "compute" or (func.attr == "extend" and _is_stage(func.value, names))


def _stage_runs(tree: ast.AST, allowed: str | None = None) -> list[int]:
    """Lines of ``tree`` that run a stage outside the class ``allowed``."""
    found: list[int] = []

    def visit(node: ast.AST, inside: bool, names: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            inside = inside or node.name == allowed
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            names = names | _stage_names(node)
        if isinstance(node, ast.Call) and not inside and _runs_a_stage(node, names):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, inside, names)

    visit(tree, False, set())
    return sorted(found)


def test_the_stage_run_checker_tells_stages_from_lists_and_executions() -> None:
    source = (
        "lines.extend(more)\n"  # a list
        "stage.extend(live, *values)\n"
        "self.plan.stages[name].extend(index)\n"
        "s.compute(env, [doc])\n"
        "self._live.extend(docs, replacing)\n"  # an execution: it runs the stages' own
        "def grow(step: Stage, found):\n"
        "    found.extend(step.extend(None))\n"
        "    for kept in plan.index_stages():\n"
        "        kept.extend(live)\n"
        "class Execution:\n"
        "    def run(self, stage):\n"
        "        return stage.compute(self.env)\n"
    )
    assert _stage_runs(ast.parse(source)) == [2, 3, 4, 7, 9, 12]
    assert _stage_runs(ast.parse(source), allowed="Execution") == [2, 3, 4, 7, 9]


def test_a_stage_runs_only_in_the_executor() -> None:
    outside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if lines := _stage_runs(tree, EXECUTORS.get(name)):
            outside[name] = lines
    assert outside == {}
    for name in EXECUTORS:  # the executor itself is seen by the checker
        assert _stage_runs(ast.parse((PACKAGE / name).read_text(encoding="utf-8")))


# ---------------------------------------------------------------- kinds declare what they know

# Modules that read what kinds declare (``ComponentConfig``: score scales, parts, redundancy,
# colours) and must never branch on a kind's name.
READERS = ("service.py", "pipeline.py", "experiment/runner.py", "experiment/estimate.py")


def _kind_names(tree: ast.AST, kinds: set[str]) -> list[tuple[int, str]]:
    """Kind names ``tree`` compares with or keys a dict by: what a module knows of a kind."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            constants = [c for c in ast.walk(node) if isinstance(c, ast.Constant)]
        elif isinstance(node, ast.Dict):
            constants = [k for k in node.keys if isinstance(k, ast.Constant)]
        else:
            continue
        found += [(c.lineno, c.value) for c in constants if c.value in kinds]
    return found


def test_no_module_outside_a_kind_names_it() -> None:
    from ragbench.registry import axes, components

    families = [a.name for a in axes()] + ["dense", "fusion", "sparse"]
    kinds = {k for family in families for k in components(family).kinds()} - {"none"}
    assert {"bm25", "dense", "hybrid", "cross_encoder", "rrf", "hnsw"} <= kinds
    paths = [PACKAGE / name for name in READERS] + sorted((PACKAGE / "report").glob("*.py"))
    named = {
        path.relative_to(PACKAGE).as_posix(): found
        for path in paths
        if (found := _kind_names(ast.parse(path.read_text(encoding="utf-8")), kinds))
    }
    assert named == {}
    source = 'if kind == "bm25":\n    x = {"dense": 1, "kind": "hybrid"}\n'  # the check can fail
    assert _kind_names(ast.parse(source), kinds) == [(1, "bm25"), (2, "dense")]
