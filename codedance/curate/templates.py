"""Prompt templates: the bundled ``codedance/curate/prompts/*.txt`` or a user's folder.

Templates use `string.Template` placeholders (``$question``, ``$width``, ...), so JSON examples
with braces need no escaping. A folder named by the YAML's ``prompts`` overrides any bundled
template file of the same name; missing ones fall back to the bundled wording. The bundled
wording is ours, following the structure and criteria of the paper's Tables 5-7.
"""

from __future__ import annotations

from pathlib import Path
from string import Template

from codedance.curate.config import CurateError

BUNDLED = Path(__file__).parent / "prompts"


def render(name: str, override: Path | None = None, **values: object) -> str:
    """Template `name` (without ``.txt``) filled with `values`; a missing value is an error."""
    path = override / f"{name}.txt" if override is not None else None
    if path is None or not path.is_file():
        path = BUNDLED / f"{name}.txt"
    try:
        return Template(path.read_text(encoding="utf-8")).substitute(values).strip()
    except (KeyError, ValueError) as exc:
        raise CurateError(
            f"prompt template {path}: placeholder {exc} has no value; "
            f"available: {', '.join('$' + k for k in values)}"
        ) from None
