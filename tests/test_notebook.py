"""notebooks/quickstart.ipynb runs top to bottom on a slice of the real traces: quietly, with
each figure explained, a verdict on the baselines, and nothing left behind."""

from __future__ import annotations

import glob
import tempfile
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.traces
def test_quickstart_runs_quietly_and_cleans_up(root, traces, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    monkeypatch.setenv("WINNOW_TRACES", str(traces))  # the kernel inherits it
    pattern = str(Path(tempfile.gettempdir()) / "winnow-quickstart-*")
    before = set(glob.glob(pattern))
    nb = nbformat.read(root / "notebooks" / "quickstart.ipynb", as_version=4)
    scratch = tmp_path / "notebooks"  # the notebook's working folder
    scratch.mkdir()
    client = nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(scratch)}}
    )
    client.execute()

    outputs = [(i, o) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])]
    streams = [o for _, o in outputs if o["output_type"] == "stream"]
    assert not [o["text"] for o in streams if o["name"] == "stderr"], "warnings or logs"
    text = "".join(o["text"] for o in streams)
    assert len(text.splitlines()) < 80, "the notebook prints too much"
    assert "macro-F1" in text and "winnow-small" in text
    assert "beats the kind/tool rule" in text, text  # trained enough to beat the plain rule
    # Either it beats the heuristic labeller too, or it says why a small slice cannot.
    assert "and beats the heuristic labeller" in text or "Why: it learned from" in text
    for i, o in outputs:
        if "image/png" in o.get("data", {}):
            before_cell = nb.cells[i - 1]
            assert before_cell.cell_type == "markdown" and len(before_cell.source) > 200, (
                "every figure is explained in the cell before it"
            )
    assert any("image/png" in o.get("data", {}) for _, o in outputs)
    assert "removed" in text and text.rstrip().endswith("True")
    assert set(glob.glob(pattern)) == before, "a /tmp/winnow-quickstart-* folder was left behind"
    assert not any(scratch.iterdir()), "the notebook must leave nothing beside itself"
