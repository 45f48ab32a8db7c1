"""``python -m rivermark.cli`` is the ``rivermark`` command."""

from __future__ import annotations

import sys

from rivermark.cli.entry import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
