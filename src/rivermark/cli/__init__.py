"""The ``rivermark`` command: run an app as a checkpointed job, inspect checkpoints.

``rivermark run path/to/app.py:name --checkpoint DIR [--every 2s] [--keep N]``
(or ``package.module:name``) imports the app, takes the graph that the
module-level variable ``name`` belongs to and runs it as a
:class:`rivermark.checkpoint.Job`.  It exits 0 once every source is exhausted
and the final checkpoint is written; SIGTERM and Ctrl-C stop it gracefully
(final checkpoint, exit 0) and say where it stopped and how to resume.
``python -m rivermark`` is the same command.  Every option of
``Job`` has a flag and an environment variable (``RIVERMARK_CHECKPOINT``,
``RIVERMARK_EVERY``, ...); ``rivermark run --help`` lists them.

``rivermark checkpoints list|show|verify|diff DIR [EPOCH [EPOCH2]]`` lists,
describes, verifies (exit 1 if any checkpoint is damaged) and compares
checkpoints; ``--json`` prints the same as JSON.  They are read-only: a path
that is not a checkpoint directory is a usage error and nothing is created.
``--from-scratch`` starts over explicitly, ``--from-savepoint DIR[@EPOCH]``
starts from a savepoint and ``--savepoint-on-stop`` makes a signal's final
checkpoint one (``docs/checkpointing.md``).

``rivermark replay APP.py:NAME --from DIR[@EPOCH] --until EPOCH|end --output
OUT [--diff]`` runs new code from a checkpoint of the live job, with every
sink's output written aside (:mod:`rivermark.checkpoint.tools.replay`,
``docs/upgrading.md``).

A usage error (unknown option, bad value) prints one line and exits 2.

One module per command group: :mod:`~rivermark.cli.run`,
:mod:`~rivermark.cli.checkpoints`, :mod:`~rivermark.cli.replay`,
:mod:`~rivermark.cli.control` (``savepoint``, ``stop``),
:mod:`~rivermark.cli.ui` and :mod:`~rivermark.cli.graph`, each a thin wrapper
around library functions (:mod:`rivermark.checkpoint.tools.inspection`,
:class:`Job`).  The options that several commands take are declared once,
in :mod:`rivermark.cli.options`; the group and the entry point are in
:mod:`~rivermark.cli.group` and :mod:`~rivermark.cli.entry`.

>>> import tempfile
>>> main(["checkpoints", "list", tempfile.mkdtemp()])
2
"""

from __future__ import annotations

# importing a command module registers its commands on the group
from rivermark.cli import checkpoints, control, graph, replay, run, ui  # noqa: F401
from rivermark.cli.entry import main
from rivermark.cli.group import cli
from rivermark.cli.run import run_command, stopped_line

__all__ = ["main", "cli", "run_command", "stopped_line"]
