"""examples/quickstart.ipynb runs top to bottom in a real Jupyter kernel (issue 28): collect, sql,
transform, train and report on a real `agl store`, the tiny model and the demo's toy agent."""

from __future__ import annotations

from tests.collect.helpers import ROOT

NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


def text_of(cell) -> str:
    """What a code cell showed: its printed text and the plain-text form of its result."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_the_notebook_is_committed_without_outputs():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.get("outputs") and c.get("execution_count") is None for c in code)


def test_the_quickstart_notebook_runs_and_leaves_a_dataset_version_a_run_and_a_report(tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / "cache"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # A cell that raises fails the test (CellExecutionError names it); each cell gets 5 minutes.
    in_tmp = {"metadata": {"path": str(tmp_path)}}  # the kernel's working folder
    NotebookClient(nb, timeout=300, kernel_name="python3", resources=in_tmp).execute()

    shown = "\n".join(text_of(c) for c in nb.cells if c.cell_type == "code")
    assert "{'succeeded': 16}" in shown
    assert "collected c" in shown and "16 new rollouts" in shown
    assert "wrote toy@v1: " in shown
    assert "succeeded" in shown and "report" in shown

    import tracebank

    wh = tracebank.open(tmp_path / "quickstart" / "warehouse")
    assert wh.dataset("toy@v1").rows > 0
    assert len(wh.runs().rows) == 1
    assert wh.sql("SELECT status, dataset FROM runs").rows() == [("succeeded", "toy@v1")]
    assert (tmp_path / "quickstart" / "models" / "v1" / "config.json").exists()
    assert (tmp_path / "quickstart" / "report.html").stat().st_size > 0
