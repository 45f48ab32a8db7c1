"""The job the control tests start: a running sum of the numbers of a text file."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_sum_app(tmp_path: Path) -> Path:
    """``tmp_path/app.py`` summing ``tmp_path/in`` (1..100, followed) into ``tmp_path/out``."""
    (tmp_path / "in").write_text("".join(f"{i}\n" for i in range(1, 101)))
    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent(
            f"""\
            from rivermark import Stream

            source = Stream.from_textfile({str(tmp_path / "in")!r}, poll_interval="20ms", name="lines")
            source.map(int).accumulate(lambda a, x: a + x, start=0, name="total").sink_to_textfile(
                {str(tmp_path / "out")!r}
            )
            """
        )
    )
    return app
