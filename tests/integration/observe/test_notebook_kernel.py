"""examples/notebook.ipynb run by a real IPython kernel (nbclient): job.run() in a cell and live outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
WIDGET = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"

# waits, in the kernel, until every live output shows the job's last records,
# then prints what each output shows (a frontend draws the same values)
CHECK = """
import json, time
from ipywidgets.widgets.widget import _instances

def shown():
    return [w.value for w in list(_instances.values()) if isinstance(getattr(w, "value", None), str)]

def settled():
    text = "\\n".join(shown())
    return all(s in text for s in ("<pre>40000</pre>", "<td>191</td>", "<td>10100</td>", "finished"))

deadline = time.monotonic() + 60
while not settled() and time.monotonic() < deadline:
    time.sleep(0.05)
print(json.dumps(shown()))
"""


def _run_notebook() -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(new_code_cell(CHECK))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    client = NotebookClient(nb, timeout=180, kernel_name="python3", store_widget_state=True)
    client.execute(cwd=str(ROOT / "examples"), env=env)
    return nb


def test_job_run_in_a_cell_returns_a_handle_and_outputs_update() -> None:
    nb = _run_notebook()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    # the stream, the streaming DataFrame, the updating Series and the job show live widgets
    widgets = [c for c in code if any(WIDGET in o.get("data", {}) for o in c.outputs)]
    assert len(widgets) == 4
    # job.run() returned at once; the next cell waited on the handle
    ended = code[-2].outputs[-1]["text"]
    assert "JobHandle done: True" in ended, ended
    values = json.loads(code[-1].outputs[-1]["text"])
    text = "\n".join(values)
    assert "<pre>40000</pre>" in values  # the last square
    frame = next(v for v in values if v.startswith("<h5>DataFrame"))
    assert "<td>191</td>" in frame and "<td>200</td>" in frame  # its last 10 rows
    assert "<td>190</td>" not in frame
    assert "<td>10100</td>" in text and "<td>10000</td>" in text  # the sums per parity
    job = next(v for v in values if v.startswith("<b>rivermark job</b>"))
    assert "finished (end of input)" in job and "<td>numbers</td><td>200</td>" in job
    # what the kernel sent the frontend: the job's output ended on its final state
    states = nb.metadata["widgets"][STATE]["state"].values()
    sent = [s["state"].get("value", "") for s in states if s["model_name"] == "HTMLModel"]
    assert any("rivermark job</b> finished (end of input)" in v for v in sent), sent
    # the updating Series is headed as one, not by its class name
    assert any(v.startswith("<h5>Series (updating): current result</h5>") for v in values), values
    assert not any("Seriess" in v for v in sent), sent
