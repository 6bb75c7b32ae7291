"""One meaning per option name: the shape and model presets have their own names, the old spellings
still work for one release and say what replaced them."""
from __future__ import annotations

import warnings

import pytest
import yaml

from accelopt_nb.cli import build_parser, main
from accelopt_nb.renamed import REMOVED_IN


def _parse(argv):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        args = build_parser().parse_args(argv)
    return args, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("argv, dest, value, old, new", [
    (["bench", "--preset", "paper"], "shapes", "paper", "--preset", "--shapes"),
    (["evaluate", "k.py", "--problem", "silu", "--preset", "paper"], "shapes", "paper", "--preset", "--shapes"),
    (["optimize", "silu", "--shape-preset", "small"], "shapes", "small", "--shape-preset", "--shapes"),
    (["llm", "check", "--preset", "gpt-oss-20b"], "model_preset", "gpt-oss-20b", "--preset", "--model-preset"),
    (["llm", "serve-cmd", "--preset", "gpt-oss-20b"], "model_preset", "gpt-oss-20b", "--preset", "--model-preset"),
])
def test_old_spellings_still_parse_and_name_the_new_one(argv, dest, value, old, new):
    args, warned = _parse(argv)
    assert getattr(args, dest) == value
    assert len(warned) == 1 and f"{old} in accelopt {argv[0]}" in warned[0] and f"renamed {new}" in warned[0]
    assert REMOVED_IN in warned[0]
    # the new spelling parses the same, silently
    new_args, new_warned = _parse([new if a == old else a for a in argv])
    assert getattr(new_args, dest) == value and new_warned == []


def test_preset_is_the_search_preset_only():
    args, warned = _parse(["optimize", "silu", "--preset", "smoke", "--shapes", "small"])
    assert (args.preset, args.shapes, warned) == ("smoke", "small", [])
    assert _parse(["bench"])[0].shapes == "small" and _parse(["optimize", "silu"])[0].shapes is None


def test_old_spelling_keeps_the_new_options_choices():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--preset", "huge"])


def test_cli_prints_the_rename_as_one_warning_line(capsys):
    assert main(["llm", "serve-cmd", "--preset", "gpt-oss-120b", "--tp", "8", "--port", "8123"]) == 0
    err = capsys.readouterr().err
    assert "accelopt llm: warning: --preset in accelopt llm serve-cmd is renamed --model-preset" in err
    assert "Traceback" not in err and "FutureWarning" not in err


def test_magics_take_shapes_and_warn_on_the_old_spellings():
    pytest.importorskip("IPython")
    from accelopt_nb.notebook.magics import PARSERS

    with pytest.warns(FutureWarning, match="--preset in %accelopt profile is renamed --shapes"):
        args = PARSERS["profile"]().parse_args(["--problem", "silu", "--preset", "paper"])
    assert args.shapes == "paper"
    with pytest.warns(FutureWarning, match="--shape-preset in %accelopt open is renamed --shapes"):
        args = PARSERS["open"]().parse_args(["silu", "--preset", "smoke", "--shape-preset", "small"])
    assert (args.preset, args.shapes) == ("smoke", "small")


def test_reproduce_config_preset_key_is_read_as_shape_preset(tmp_path):
    from accelopt_nb.reproduce.runner import load_job

    cfg = tmp_path / "old.yaml"
    cfg.write_text(yaml.safe_dump({"notebook": "25_saturation.ipynb", "preset": "paper", "hw": "trn1"}))
    with pytest.warns(FutureWarning, match=r"preset in .*old\.yaml is renamed shape_preset"):
        job = load_job(cfg)
    assert job.params == {"shape_preset": "paper", "hw": "trn1"}
    cfg.write_text(yaml.safe_dump({"notebook": "25_saturation.ipynb", "shape_preset": "paper", "hw": "trn1"}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_job(cfg).params == {"shape_preset": "paper", "hw": "trn1"}
