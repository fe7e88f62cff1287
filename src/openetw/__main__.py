"""``python -m openetw`` runs the ``openetw`` command."""

from openetw.cli.main import console_main

console_main()
