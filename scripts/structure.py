#!/usr/bin/env python3
"""The structure numbers of issue 35's before/after: import loops, the longest functions, imports inside
functions, README lines. Reads the source as text (nothing is imported or run).

    python scripts/structure.py [ROOT] [--top N]        (ROOT: a checkout, default this one)

An import counts wherever it stands (module level or inside a function) unless it sits under
``if TYPE_CHECKING:``; an import loop is a set of modules that import each other (a strongly connected component).
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGES = ("accelopt_nb", "nkibench")


def _module(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _scan(root: Path):
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    modules = {_module(root, p): p for p in files}
    graph: dict[str, set[str]] = {}
    functions: list[tuple[int, str]] = []
    inner_imports: set[int] = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and "TYPE_CHECKING" in ast.unparse(node.test) for stmt in node.body for n in ast.walk(stmt)}
        deps: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((node.end_lineno - node.lineno + 1,
                                  f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}"))
                inner_imports.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
        # a package's __init__ is not a dependency of its own submodules' loops
        graph[name] = {d for d in deps if d in modules and d != name and not name.startswith(d + ".")}
    return graph, functions, len(inner_imports)


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args(argv)
    root = Path(args.root)
    graph, functions, inner = _scan(root)
    loops = _loops(graph)
    readme = root / "README.md"
    print(f"README.md: {len(readme.read_text().splitlines()) if readme.is_file() else 0} lines")
    print(f"modules: {len(graph)}; imports inside functions: {inner}")
    print(f"import loops: {len(loops)} ({sum(map(len, loops))} modules)")
    for comp in loops:
        print("  " + " <-> ".join(comp))
    functions.sort(reverse=True)
    print(f"functions over 60 lines: {sum(n > 60 for n, _ in functions)}; the {args.top} longest:")
    for n, where in functions[:args.top]:
        print(f"  {n:4d}  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
