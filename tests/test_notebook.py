"""notebooks/quickstart.ipynb runs top to bottom (tiny settings, a slice of the real traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
NOTEBOOK = ROOT / "notebooks" / "quickstart.ipynb"


@pytest.mark.slow
@pytest.mark.traces
@pytest.mark.skipif(not TRACES.exists(), reason="needs ../shared/traces")
def test_quickstart_runs(tmp_path):
    pytest.importorskip("torch")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # Run from a scratch folder: the notebook writes its work files beside itself.
    scratch = tmp_path / "notebooks"
    scratch.mkdir()
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT)!r})"))
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(scratch)}}
    )
    client.execute()
    outputs = "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        for o in c.get("outputs", [])
    )
    assert "model.onnx" in outputs
    assert "macro-F1" in outputs
    assert "confusion.png" in outputs
    assert not any(scratch.iterdir()), "the notebook must leave nothing beside itself"
