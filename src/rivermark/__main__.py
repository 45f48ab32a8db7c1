"""``python -m rivermark`` is the ``rivermark`` command (:func:`rivermark.cli.main`)."""

from __future__ import annotations

import sys

from rivermark.cli import main

if __name__ == "__main__":
    sys.exit(main())
