"""The simulator's layering: wings with one direction of imports, no import loop, and a performance model that sees
only the trace types.

Every import statement of ``accelopt_nb/sim`` counts (at module level or inside a function), except those under
``if TYPE_CHECKING:`` (annotations only, never run).
"""
import ast
import subprocess
import sys
from pathlib import Path

SIM = Path(__file__).resolve().parent.parent / "accelopt_nb" / "sim"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SIM.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The accelopt_nb.sim modules a file imports (a package's submodule named in ``from pkg import x`` counts as
    that submodule)."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    files = {_module_name(p) for p in SIM.rglob("*.py")}
    return {m for m in out if m in files and m.startswith("accelopt_nb.sim")}


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) - {_module_name(p)} for p in SIM.rglob("*.py")}


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in ("core", "api", "replay") else "top"


def test_the_core_imports_neither_the_api_nor_replay_and_replay_no_api():
    bad = []
    for module, deps in _graph().items():
        for dep in deps:
            pair = (_wing(module), _wing(dep))
            if pair in {("core", "api"), ("core", "replay"), ("replay", "api")}:
                bad.append(f"{module} -> {dep}")
            # below the package: only the trace types (the contract with the performance model)
            if _wing(dep) == "top" and module != "accelopt_nb.sim" and dep != "accelopt_nb.sim.trace":
                bad.append(f"{module} -> {dep}")
            # the API meets the replay wing in one place: the launch attaches it to the runtime
            if pair == ("api", "replay") and module != "accelopt_nb.sim.api.kernel":
                bad.append(f"{module} -> {dep}")
    assert bad == []


def test_no_import_loop_inside_the_simulator():
    graph = _graph()
    done: set[str] = set()
    stack: list[str] = []

    def visit(m: str) -> None:
        if m in stack:
            raise AssertionError("import loop: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            visit(d)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    assert len(done) >= 30


def test_perf_loads_only_the_trace_types_of_the_simulator():
    # perf loads its modules on first use, so import the model itself, not just the package.
    code = ("import sys, accelopt_nb.perf\n"
            "from accelopt_nb.perf import estimate, Profile\n"
            "import accelopt_nb.perf.model, accelopt_nb.perf.schedule, accelopt_nb.perf.calibrate\n"
            "print(sorted(m for m in sys.modules if m.startswith('accelopt_nb.sim')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['accelopt_nb.sim', 'accelopt_nb.sim.trace']"
