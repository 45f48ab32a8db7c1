"""The seed-0 app the crash-loop test runs (and SIGKILLs) in a subprocess.

It runs ``examples/seed0_kafka.py`` unchanged (same argv and env variables);
loaded by path because ``examples/`` is not a package.

argv: bootstrap topic checkpoint_dir output_file
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "seed0_kafka.py"


def main() -> None:
    spec = importlib.util.spec_from_file_location("seed0_kafka", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()


if __name__ == "__main__":
    main()
