"""Pulling a kernel out of a free-text LLM answer.

Models answer in many shapes: reasoning first and the final kernel last, several code blocks
(a sketch, then the real thing), a block cut off before its closing fence, a ``py`` or
``python3`` tag, a ``<think>`` section, or no fence at all. The authors' code took the first
fenced block, which is usually the sketch. Here every candidate block is parsed with
:mod:`ast` and the **last complete block that is valid Python and defines the kernel** wins;
weaker fallbacks are tried only when that fails, and each result says how it was found.

The raw response is always kept next to the result, so a person can see what the model said
when extraction fails.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from accelopt_nb.pyutil import parse

# Info strings of blocks that may hold the kernel. An untagged block counts as Python.
PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "nki", "ipython", "python-nki"})

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)

# Module names NKI kernels refer to, and the import that provides each one. Used to repair a
# block that shows only the function (the harness of the paper prepended a fixed header).
_STANDARD_IMPORTS = {
    "np": "import numpy as np",
    "math": "import math",
    "nki": "import neuronxcc.nki as nki",
    "nl": "import neuronxcc.nki.language as nl",
    "nisa": "import neuronxcc.nki.isa as nisa",
    "nt": "import neuronxcc.nki.typing as nt",
    "par_dim": "from neuronxcc.nki.language import par_dim",
}


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a response."""

    lang: str
    code: str
    complete: bool
    line: int  # 1-based line of the opening fence


@dataclass
class ExtractedCode:
    """The outcome of :func:`extract_code`: the code (or why there is none) and the raw answer."""

    raw: str
    code: str | None
    method: str | None = None  # fenced | fenced-unterminated | unfenced | joined
    n_blocks: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.code is not None


# Harmony (gpt-oss) output read raw: <|channel|>analysis<|message|>…<|end|><|start|>assistant
# <|channel|>final<|message|>…<|return|>; with the special tokens stripped by the server it reads
# "analysis…assistantfinal…".
_HARMONY_SEGMENT = re.compile(r"<\|channel\|>\s*(\w+)[^<]*<\|message\|>(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|"
                              r"<\|start\|>|<\|channel\|>|\Z)", re.DOTALL)
_HARMONY_TOKEN = re.compile(r"<\|(?:start|end|message|channel|return|call|constrain)\|>")
_HARMONY_STRIPPED = re.compile(r"\A\s*analysis(?P<reasoning>.*?)assistant\s*final(?P<answer>.*)\Z", re.DOTALL)


def split_harmony(text: str) -> tuple[str, str] | None:
    """(reasoning, answer) of a harmony-format answer; None when the text is not one."""
    if "<|channel|>" in text or "<|message|>" in text:
        reasoning, answer = [], []
        for channel, body in _HARMONY_SEGMENT.findall(text):
            (answer if channel == "final" else reasoning).append(body.strip())
        if not reasoning and not answer:
            return "", _HARMONY_TOKEN.sub("", text).strip()
        return "\n\n".join(reasoning).strip(), "\n\n".join(answer).strip()
    m = _HARMONY_STRIPPED.match(text)
    if m:
        return m.group("reasoning").strip(), m.group("answer").strip()
    return None


def split_reasoning(text: str) -> tuple[str, str]:
    """Split reasoning from the final answer: returns (reasoning, answer).

    Understands ``<think>…</think>`` and harmony channels (``analysis`` vs ``final``, raw or
    with the special tokens stripped). An unclosed ``<think>`` (the answer was cut off while
    reasoning) leaves an empty answer.
    """
    harmony = split_harmony(text)
    if harmony is not None:
        return harmony
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        last = closes[-1]
        head = text[: last.start()]
        opened = _THINK_OPEN.search(head)
        reasoning = head[opened.end():] if opened else head
        return reasoning.strip(), text[last.end():].strip()
    opened = _THINK_OPEN.search(text)
    if opened:
        return text[opened.end():].strip(), ""
    return "", text.strip()


def find_code_blocks(text: str) -> list[CodeBlock]:
    """All fenced blocks in order; a final block without a closing fence is marked incomplete.

    A closing fence uses the same character as the opening one, at least as many of them, and
    nothing else on its line (CommonMark's rule), so ``` inside a ```` block does not close it.
    """
    lines = text.splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), m.group("indent")
        info = m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(lines[j])
            j += 1
        complete = j < len(lines)
        blocks.append(CodeBlock(lang=lang, code=_dedent(body, indent), complete=complete, line=i + 1))
        i = j + 1
    return blocks


def _dedent(body: list[str], indent: str) -> str:
    # A fence indented inside a list item indents its content by the same amount.
    if indent:
        body = [ln[len(indent):] if ln.startswith(indent) else ("" if not ln.strip() else ln)
                for ln in body]
    return "\n".join(body).strip("\n")


def _parses(code: str) -> tuple[ast.Module | None, str | None]:
    try:
        return parse(code), None
    except SyntaxError as exc:
        return None, f"line {exc.lineno}: {exc.msg}"


def _top_level_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


def _is_jit(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if "jit" in ast.unparse(target):
            return True
    return False


def _defines_name(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _has_kernel(tree: ast.Module, function_name: str) -> bool:
    return _defines_name(tree, function_name) or any(_is_jit(f) for f in _top_level_functions(tree))


def normalize_kernel_source(code: str, function_name: str = "kernel") -> tuple[str, list[str]]:
    """Make a parsed block loadable: alias the entry point and add missing standard imports.

    Returns the new source and notes describing each repair. The source must parse.
    """
    notes: list[str] = []
    tree = parse(code)
    if not _defines_name(tree, function_name):
        fns = _top_level_functions(tree)
        jitted = [f for f in fns if _is_jit(f)]
        pick = jitted[-1] if jitted else (fns[-1] if len(fns) == 1 else None)
        if pick is not None:
            code = code.rstrip("\n") + f"\n\n\n{function_name} = {pick.name}\n"
            notes.append(f"entry point {pick.name!r} aliased as {function_name!r}")
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update((a.asname or a.name.split(".")[0]) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.update((a.asname or a.name) for a in node.names)
    assigned = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    assigned |= {f.name for f in _top_level_functions(tree)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    missing = [name for name in _STANDARD_IMPORTS if name in used and name not in imported | assigned]
    if missing:
        header = "\n".join(_STANDARD_IMPORTS[name] for name in missing)
        code = header + "\n\n" + code.lstrip("\n")
        notes.append("added missing imports: " + ", ".join(missing))
    if not code.endswith("\n"):
        code += "\n"
    return code, notes


def extract_code(text: str | None, function_name: str = "kernel") -> ExtractedCode:
    """Extract the kernel module from an LLM answer (see the module docstring for the rules)."""
    raw = text or ""
    if not raw.strip():
        return ExtractedCode(raw=raw, code=None, error="empty response")
    _, answer = split_reasoning(raw)
    # Search the final answer first; the reasoning only if the answer holds no usable code.
    errors: list[str] = []
    for scope in ([answer, raw] if answer != raw.strip() else [raw]):
        found = _extract_from(scope, function_name, errors)
        if found is not None:
            code, method, n_blocks, notes = found
            if scope is raw and answer != raw.strip():
                notes.append("code taken from the reasoning section")
            return ExtractedCode(raw=raw, code=code, method=method, n_blocks=n_blocks, notes=notes)
    n_blocks = len(find_code_blocks(raw))
    if n_blocks == 0:
        error = "no code block in the response"
    else:
        error = f"none of the {n_blocks} code block(s) is valid Python defining `{function_name}`"
        if errors:
            error += " (" + "; ".join(dict.fromkeys(errors)) + ")"
    return ExtractedCode(raw=raw, code=None, n_blocks=n_blocks, error=error)


def _extract_from(text: str, function_name: str,
                  errors: list[str]) -> tuple[str, str, int, list[str]] | None:
    blocks = find_code_blocks(text)
    py_blocks = [b for b in blocks if b.lang in PYTHON_TAGS]
    # 1. The last complete Python block that parses and defines the kernel.
    for block in reversed([b for b in py_blocks if b.complete]):
        tree, err = _parses(block.code)
        if tree is None:
            errors.append(f"block at line {block.line}: syntax error {err}")
            continue
        if _has_kernel(tree, function_name):
            code, notes = normalize_kernel_source(block.code, function_name)
            return code, "fenced", len(blocks), notes
    # 2. A final block whose closing fence never came (the answer was cut short or malformed).
    if py_blocks and not py_blocks[-1].complete:
        tree, err = _parses(py_blocks[-1].code)
        if tree is not None and _has_kernel(tree, function_name):
            code, notes = normalize_kernel_source(py_blocks[-1].code, function_name)
            return code, "fenced-unterminated", len(blocks), notes + ["closing fence missing"]
        if tree is None:
            errors.append(f"unterminated block at line {py_blocks[-1].line}: syntax error {err}")
    # 3. No fences at all: the whole answer may be the module.
    if not blocks:
        tree, _ = _parses(text)
        if tree is not None and _has_kernel(tree, function_name):
            code, notes = normalize_kernel_source(text, function_name)
            return code, "unfenced", 0, notes
    # 4. The module split across blocks (imports and helpers in one, the kernel in another).
    complete = [b for b in py_blocks if b.complete]
    if len(complete) > 1:
        joined = "\n\n".join(b.code for b in complete)
        tree, _ = _parses(joined)
        if tree is not None and _has_kernel(tree, function_name):
            code, notes = normalize_kernel_source(joined, function_name)
            return code, "joined", len(blocks), notes + [f"joined {len(complete)} blocks"]
    return None


_TITLE = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)


def first_bold(text: str) -> str | None:
    """The first ``**…**`` span of a text (the summarizer's title), stripped; None if absent."""
    m = _TITLE.search(text)
    return " ".join(m.group(1).split()) if m else None
