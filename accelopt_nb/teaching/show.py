"""Showing the course's kernels in a notebook: one function from a shipped kernel file, or two side by side.

The course's kernels live once, as files in :mod:`accelopt_nb.kernels`; the notebooks simulate
them from there and show their source with these helpers, so what a learner reads is what ran.
"""
from __future__ import annotations

import ast
import html
from dataclasses import dataclass

from accelopt_nb.kernels import kernel_path


def kernel_source(file: str, name: str | None = None, *, imports: bool = False) -> str:
    """The source of function ``name`` (decorators included) in shipped kernel ``file``.

    ``name=None`` gives the whole file; ``imports=True`` puts the file's import lines first.
    """
    text = kernel_path(file).read_text()
    if name is None:
        return text
    lines = text.splitlines()
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            body = "\n".join(lines[start:node.end_lineno])
            if imports:
                head = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
                body = "\n".join(head) + "\n\n\n" + body
            return body + "\n"
    from accelopt_nb.errors import ConfigError
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    raise ConfigError(f"kernel file {file!r} has no function {name!r}; it has: {', '.join(names)}")


def _highlight(code: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:                       # pragma: no cover - pygments comes with IPython
        return f"<pre>{html.escape(code)}</pre>"
    return highlight(code, PythonLexer(), HtmlFormatter(noclasses=True, nowrap=False,
                                                        style="default", cssstyles="font-size:12px"))


@dataclass(frozen=True)
class Code:
    """Source shown in a notebook: highlighted in JupyterLab, plain text elsewhere."""

    code: str
    title: str = ""

    def __str__(self) -> str:
        return (f"# {self.title}\n" if self.title else "") + self.code

    __repr__ = __str__

    def _repr_html_(self) -> str:
        title = f"<div style='font-weight:bold;margin:4px 0'>{html.escape(self.title)}</div>" if self.title else ""
        return title + _highlight(self.code)


@dataclass(frozen=True)
class SideBySide:
    """Two sources in two columns (HTML), or one after the other (text)."""

    left: Code
    right: Code

    def __str__(self) -> str:
        return f"{self.left}\n\n{self.right}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        cell = "<td style='vertical-align:top;text-align:left;padding:0 8px;width:50%'>{}</td>"
        return ("<table style='border:none;width:100%'><tr>" + cell.format(self.left._repr_html_())
                + cell.format(self.right._repr_html_()) + "</tr></table>")


def show_kernel(file: str, name: str | None = None, *, imports: bool = False, title: str = "") -> Code:
    """Display function ``name`` of shipped kernel ``file`` (the notebook cell shows the return value)."""
    return Code(kernel_source(file, name, imports=imports), title or f"accelopt_nb/kernels/{file}.py" + (f": {name}" if name else ""))


def side_by_side(left: tuple[str, str | None], right: tuple[str, str | None], *, titles: tuple[str, str] = ("", ""),
                 imports: bool = True) -> SideBySide:
    """Two kernels beside each other, e.g. the same kernel in the NKI 0.1 and today's ``nki`` style."""
    return SideBySide(Code(kernel_source(*left, imports=imports), titles[0] or f"{left[0]}.py"),
                      Code(kernel_source(*right, imports=imports), titles[1] or f"{right[0]}.py"))


__all__ = ["Code", "SideBySide", "kernel_source", "show_kernel", "side_by_side"]
