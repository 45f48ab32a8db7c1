"""The examples of docs/joins.md run as written and print what the page shows."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "joins.md"


def test_every_example_of_the_joins_page_runs() -> None:
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    names: dict[str, object] = {}  # the page's examples build on the first one's imports
    for i, block in enumerate(blocks):
        test = parser.get_doctest(block, names, f"joins.md[{i}]", str(DOC), 0)
        assert test.examples, f"block {i} has no examples"
        runner.run(test, clear_globs=False)
        names.update(test.globs)
    assert runner.failures == 0, f"{runner.failures} example(s) of {DOC.name} failed (see above)"
