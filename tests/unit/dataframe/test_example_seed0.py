"""The seed-0 example (in-memory version) resumes to exactly the uninterrupted result."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pandas.testing as tm

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "seed0_sdf.py"


def test_seed0_example_resume_equals_uninterrupted() -> None:
    spec = importlib.util.spec_from_file_location("seed0_sdf", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    uninterrupted, resumed = mod.main()
    tm.assert_frame_equal(resumed, uninterrupted)
    # and both equal pandas over the last 5 rows of the concatenated input
    whole = pd.concat([mod.preprocess(b) for b in mod.make_batches()], ignore_index=True)
    want = whole.tail(5).groupby(["Name"]).agg({"Amount": "sum"}).reset_index()
    tm.assert_frame_equal(resumed, want)
