"""Building the teacher's snippets and reading their output back.

A snippet is a complete script: imports, the source of the `codedance.teacher.pixels` routines
it uses, ``img`` as an RGB array of ``input_image``, the step's body, and a last line printing
``DONE`` (so a step that did not run to its end is recognisable in any prompt profile's
feedback). Results are printed as ``RESULT: <value>`` lines.

`compact` is the short style (``TeacherConfig.code_style="compact"``): the two imports, ``img``,
the body with its pixel work written inline (no pasted helpers, no docstrings or comments, no
annotated image), ``DONE`` — a handful of lines where `snippet` writes ~40.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HEADER = "import numpy as np\nimport cv2\nfrom PIL import Image\n"
COMPACT_HEADER = "import numpy as np\nimport cv2\n"
LOAD = "img = np.asarray(input_image.convert('RGB'))\n"
RESULT = re.compile(r"^RESULT:\s*(.+?)\s*$", re.MULTILINE)


def snippet(body: str, helpers: tuple[Callable[..., Any], ...] = ()) -> str:
    """The full script for `body` with the helpers' source pasted in."""
    sources = "".join(inspect.getsource(h) + "\n" for h in helpers)
    return f"{HEADER}\n{sources}{LOAD}{body.strip()}\nprint('DONE')\n"


def compact(body: str) -> str:
    """The compact-style script for `body` (its routines written inline by the solver)."""
    return f"{COMPACT_HEADER}{LOAD}{body.strip()}\nprint('DONE')\n"


def finished(feedback: str) -> bool:
    """Whether the step whose feedback this is ran to its end."""
    return bool(re.search(r"^DONE\s*$", feedback, re.MULTILINE))


def results(feedback: str) -> list[str]:
    """Every ``RESULT:`` value printed in the feedback, in order."""
    return RESULT.findall(feedback)


@dataclass(frozen=True)
class Step:
    """One tool step: what the teacher thinks, the code it writes, and how it reads the output.

    ``check(feedback)`` returns a sentence naming a problem the output shows (then ``fix`` runs
    next) or None when the output looks right.
    """

    think: str
    code: str
    check: Callable[[str], str | None] = field(default=lambda _feedback: None)
    fix: Step | None = None
