"""No import loop anywhere in accelopt_nb or nkibench, found the way scripts/structure.py reports them: every import
statement counts (module level or inside a function), except those under ``if TYPE_CHECKING:``."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(structure)


def test_no_import_loop_in_the_packages():
    graph, _, _ = structure._scan(ROOT)
    assert structure._loops(graph) == []


def test_a_deferred_import_closes_a_loop_and_a_type_checking_one_does_not(tmp_path):
    pkg = tmp_path / "accelopt_nb"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    from accelopt_nb.b import g\n")
    (pkg / "b.py").write_text("from accelopt_nb.a import f\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from accelopt_nb.a import f\n")
    (pkg / "d.py").write_text("from accelopt_nb.c import x\n")
    (tmp_path / "nkibench").mkdir()
    graph, _, inner = structure._scan(tmp_path)
    assert structure._loops(graph) == [["accelopt_nb.a", "accelopt_nb.b"]] and inner == 1
