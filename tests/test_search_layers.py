"""The search package has no import loop: every import statement of ``accelopt_nb/search`` counts (module level or
inside a function), except those under ``if TYPE_CHECKING:`` (annotations only, never run)."""
import ast
from pathlib import Path

SEARCH = Path(__file__).resolve().parent.parent / "accelopt_nb" / "search"


def _imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for n in ast.walk(stmt)}
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out & modules


def _loops(folder: Path = SEARCH) -> list[list[str]]:
    names = {p: "accelopt_nb.search" + ("" if p.stem == "__init__" else f".{p.stem}") for p in folder.glob("*.py")}
    modules = set(names.values())
    graph = {names[p]: _imports(p, modules) - {names[p], "accelopt_nb.search"} for p in names}
    loops, done, stack = [], set(), []

    def visit(m: str) -> None:
        if m in stack:
            loops.append(stack[stack.index(m):] + [m])
            return
        if m in done:
            return
        stack.append(m)
        for d in sorted(graph[m]):
            visit(d)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    return loops


def test_no_import_loop_inside_the_search():
    assert _loops() == []


def test_the_check_sees_a_deferred_import(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from accelopt_nb.search.b import g\n")
    (tmp_path / "b.py").write_text("from accelopt_nb.search.a import f\n")
    assert _loops(tmp_path) == [["accelopt_nb.search.a", "accelopt_nb.search.b", "accelopt_nb.search.a"]]
