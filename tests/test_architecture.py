"""Data flows one way (README "Layout": spec -> trace -> costs -> plan -> analysis ->
report / plots), so perfmodel's modules import each other without a cycle (functions'
local imports included)."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "perfmodel"


def _module_name(path: Path) -> str:
    parts = path.with_suffix("").relative_to(PACKAGE.parent).parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                candidates = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            # importing a submodule runs its package's __init__ only for the package itself
            graph[name] |= {c for c in candidates if c in files and c != name and c != "perfmodel"}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt, stack + [nxt])):
                return cycle
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [node])):
            return cycle
    return None


def test_the_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_perfmodel_has_no_import_cycle():
    graph = import_graph()
    assert {"perfmodel.api", "perfmodel.measured", "perfmodel.plots.gap"} <= set(graph)
    assert find_cycle(graph) is None


def test_readers_take_results():
    """compare and gap receive analysis results: they import no stage of the pipeline."""
    pipeline = {"analyze", "analyze_spec", "reanalyze", "trace", "load_spec", "build_model",
                "make_kernels", "waterline"}
    for reader in ("compare.py", "gap.py"):
        tree = ast.parse((PACKAGE / reader).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                 for a in n.names}
        assert not names & pipeline, (reader, names & pipeline)
    graph = import_graph()
    assert "perfmodel.report" not in graph["perfmodel.api"]
    assert "perfmodel.bench" not in graph["perfmodel.ncu"]
