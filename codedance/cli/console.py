"""The rich console every command prints through.

Off a terminal (CI logs, ``| tee``, a file) rich assumes 80 columns and cuts table cells to
"pho…"; there the console is 160 columns wide instead, unless ``COLUMNS`` says otherwise.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPED_WIDTH = 160


def make_console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
    return Console(stderr=stderr, width=width)
