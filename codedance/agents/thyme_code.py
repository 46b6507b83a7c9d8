"""Thyme's code tool: how a snippet is rewritten, run and turned into an observation.

Follows ``eval/VLMEvalKit/vlmeval/vlm/thyme/sandbox.py`` of yfzhang114/Thyme at commit
b9285b7a0c5f1effcd9908ec5936fae47fc592e5 (``execute_code_in_sandbox``); see `codedance.agents.thyme`
for the loop. What that file does with a snippet, and what is done here:

- Refused before anything runs: text matching its list of dangerous calls (``sys.``,
  ``subprocess.``, ``exec(``, ``os.remove`` ...; case-insensitive). A refusal is a failed step.
- Rewritten on the host (`prepare`): the first line given the second line's indentation, the
  whole dedented and stripped; ``image_path = "…"`` pointing at no image file set to the input's
  path; four-number tuples assigned to ``x1, y1, x2, y2``-like names or to ``crop_box``/``bbox``/…
  clamped into the image and widened to 64 pixels (`clamp_box`); ``cv.``/``cv3.``/``cv4.``/``CV.``
  made ``cv2.``; the code re-written by ``ast.unparse`` after each of those that changed it;
  ``/mnt/data/temp_processed_images/`` replaced by the output folder; ``:.Nf}`` formats made
  ``:.8f}``.
- Run in the caller's sandbox (`PRELUDE`, `ThymeRunner`) by ``exec`` with its restricted builtins
  and its globals (``os``, ``random``, ``string``, ``math``, ``Image``, ``numpy``/``np``, ``json``,
  ``re``, ``cv2``) and one locals mapping carried from step to step (``image_path``,
  ``temp_output_dir`` and whatever the code assigns); printed output captured and stripped.
- Its outputs (`_thyme_outputs` in `PRELUDE`): ``processed_path`` (when new this step) if it is a
  file in the output folder; paths into the output folder printed by the code that are files;
  when none, every image file in the folder if as many paths were printed; when still none and
  the code does not name the folder, the printed text itself. No output, or an exception, fails
  the step: the sandbox rolls it back, as the source restores its saved variables.
- The model gets each output image as qwen-vl-utils' ``fetch_image`` gives it to the processor
  (`codedance.agents.thyme.model_image`), or the text.

Not reproduced: ``autopep8.fix_code`` (aggressive level 2; a style pass, not installed here);
the output folder is the sandbox's own (the source's is shared by every sample of a run, so its
"every image in the folder" rule can pick up files of earlier samples there); whether an
``image_path`` literal names an existing image is decided from the input's path alone (files
the code wrote itself are not looked at); its 10 s limit is the run's ``--exec-timeout``.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap

from codedance.rollout import CodeRunner
from codedance.types import ExecError, ExecResult, ExecStatus

IMAGE_PATH = "input_image.jpg"  # the input as the sandbox holds it (its working directory)
OUTPUT_DIR = "./temp_processed_images/"
MODEL_OUTPUT_DIR = (
    "/mnt/data/temp_processed_images/"  # the folder the model was trained to write to
)
MIN_CROP = 64
NEW_ATTEMPT = "# thyme: new attempt\n"  # an action starting so runs on fresh variables
_MARK = "\x00thyme-outputs:"
_DANGEROUS = re.compile(
    r"\bsys\.|\bsocket\.|\bsubprocess\.|\bexec\(|\beval\(|\bcompile\(|\b__import__\("
    r"|\bos\.(remove|unlink|rmdir)\b|\bshutil\.rmtree\b|\bshutil\.move\b|\bos\.(rename|renames)\b",
    re.IGNORECASE,
)
_BOX_NAMES = frozenset(
    [
        "crop_box",
        "bbox",
        "box",
        "coordinates",
        "coords",
        "crop_coords",
        "left_crop_coords",
        "right_crop_coords",
        "top_crop_coords",
        "bottom_crop_coords",
    ]
)
_CORNER_NAMES = frozenset(["x1", "y1", "x2", "y2", "left", "top", "right", "bottom"])
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tiff", ".webp")
_WRONG_CV = frozenset(("cv", "cv4", "cv3", "CV"))


def is_refused(code: str) -> bool:
    """True for code the source refuses to run (its dangerous-call patterns)."""
    return _DANGEROUS.search(code) is not None


def align_first_line(code: str) -> str:
    """The first non-blank line re-indented like the second (models often indent only the rest).

    >>> align_first_line("x = 1\\n    y = 2")
    '    x = 1\\n    y = 2'
    """
    lines = code.splitlines()
    filled = [n for n, line in enumerate(lines) if line.strip()][:2]
    if len(filled) < 2:
        return code
    first, second = (lines[n] for n in filled)
    indent = second[: len(second) - len(second.lstrip(" "))]
    if first[: len(first) - len(first.lstrip(" "))] != indent:
        lines[filled[0]] = indent + first.lstrip(" ")
    return "\n".join(lines)


def clamp_box(
    x1: float, y1: float, x2: float, y2: float, width: float, height: float
) -> list[float]:
    """A box ordered, clamped into a ``width`` x ``height`` image and widened to `MIN_CROP`.

    >>> clamp_box(400, 300, 520, 400, 448, 336)
    [384.0, 272.0, 448.0, 336.0]
    """

    def axis(lo: float, hi: float, size: float) -> tuple[float, float]:
        lo, hi = min(lo, hi), max(lo, hi)
        a = min(max(0.0, lo), size - 1.0 if size > 0 else 0.0)
        b = min(max(0.0, hi), size)
        if a >= b and size > 0:
            a = max(0.0, b - 1.0)
            if b <= a:
                b = min(size, a + 1.0)
        if size > 0 and b - a < MIN_CROP:
            if size < MIN_CROP:
                a, b = 0.0, size
            else:
                b = a + MIN_CROP
                if b > size:
                    b = size
                    a = max(0.0, b - MIN_CROP)
        if size > 0 and a >= b:
            b = min(size, a + 1.0)
        return a, b

    left, right = axis(x1, x2, float(width))
    top, bottom = axis(y1, y2, float(height))
    return [left, top, right, bottom]


def _number(node: ast.expr) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    return None


def _clamp_tuple(value: ast.Tuple, width: int, height: int) -> bool:
    """Clamp a four-number tuple literal in place; True when its rounded values changed."""
    numbers = [_number(e) for e in value.elts]
    if any(n is None for n in numbers):
        return False
    clamped = clamp_box(*numbers, width, height)  # type: ignore[arg-type]
    if [round(c) for c in clamped] == [round(n) for n in numbers]:  # type: ignore[arg-type]
        return False
    value.elts = [ast.Constant(value=round(c)) for c in clamped]
    return True


def _rewrite_image_path(tree: ast.Module, image_path: str) -> bool:
    changed = False
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "image_path"
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            continue
        literal = node.value.value
        exists = literal in (image_path, f"./{image_path}") and literal.lower().endswith(
            _IMAGE_SUFFIXES
        )
        if not exists:
            node.value = ast.Constant(value=image_path)
            changed = True
    return changed


def _clamp_boxes(tree: ast.Module, width: int, height: int) -> bool:
    changed = False
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.value, ast.Tuple)
            and len(node.value.elts) == 4
        ):
            continue
        target = node.targets[0]
        if isinstance(target, ast.Tuple):
            names = [t.id.lower() for t in target.elts if isinstance(t, ast.Name)]
            if len(target.elts) == 4 and len(names) == 4 and _CORNER_NAMES & set(names):
                changed |= _clamp_tuple(node.value, width, height)
        elif isinstance(target, ast.Name) and target.id in _BOX_NAMES:
            changed |= _clamp_tuple(node.value, width, height)
    return changed


def _rename_cv(tree: ast.Module) -> bool:
    changed = False
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in _WRONG_CV
        ):
            node.value.id = "cv2"
            changed = True
    return changed


def _rewritten(code: str, rewrite) -> str:
    """``code`` after one AST rewrite, unparsed only when it changed something (as the source)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    return ast.unparse(tree) if rewrite(tree) else code


def prepare(code: str, image_size: tuple[int, int], image_path: str = IMAGE_PATH) -> str:
    """The snippet as the source executes it (see the module docstring)."""
    code = textwrap.dedent(align_first_line(code)).strip()
    code = _rewritten(code, lambda tree: _rewrite_image_path(tree, image_path))
    code = _rewritten(code, lambda tree: _clamp_boxes(tree, *image_size))
    code = _rewritten(code, _rename_cv)
    code = code.replace(MODEL_OUTPUT_DIR, OUTPUT_DIR)
    return re.sub(r":\.\d{1}f}", ":.8f}", code)


_BUILTIN_NAMES = [
    "print",
    "len",
    "str",
    "int",
    "float",
    "list",
    "dict",
    "tuple",
    "range",
    "round",
    "abs",
    "min",
    "max",
    "sum",
    "sorted",
    "any",
    "all",
    "zip",
    "map",
    "filter",
    "isinstance",
    "issubclass",
    "Exception",
    "ValueError",
    "TypeError",
    "AttributeError",
    "IndexError",
    "KeyError",
    "NotImplementedError",
    "enumerate",
    "pow",
    "divmod",
    "bin",
    "oct",
    "hex",
    "complex",
    "__import__",
    "globals",
    "locals",
    "open",
]
_KINDS = r"\.(?:jpg|jpeg|png|bmp|gif|tiff)"
_IN_FOLDER = "(" + re.escape(OUTPUT_DIR) + r"[^\s'\"]+" + _KINDS + ")"
_ANYWHERE = r"([^\s'\"]+" + _KINDS + ")"
_BUILTIN_MODULES = "os shutil itertools re time datetime math cmath collections json PIL random"

PRELUDE = f"""
import builtins as _builtins, contextlib as _contextlib, glob as _glob, io as _io
import json as _json, os as _os, re as _re, sys as _sys
_os.makedirs({OUTPUT_DIR!r}, exist_ok=True)


def _thyme_globals():
    import importlib, math, os, random, re, string, json, numpy
    from PIL import Image, UnidentifiedImageError
    allowed = {{name: getattr(_builtins, name) for name in {_BUILTIN_NAMES!r}}}
    allowed.update({{"True": True, "False": False, "None": None}})
    allowed["UnidentifiedImageError"] = UnidentifiedImageError
    allowed.update((m, importlib.import_module(m)) for m in {_BUILTIN_MODULES!r}.split())
    namespace = dict(__builtins__=allowed, os=os, random=random, string=string, math=math,
                     Image=Image, UnidentifiedImageError=UnidentifiedImageError, numpy=numpy,
                     np=numpy, json=json, re=re)
    try:
        import cv2
        namespace["cv2"] = cv2
    except ImportError:
        pass
    return namespace


def _thyme_fresh():
    global _thyme_locals
    _thyme_locals = {{"image_path": {IMAGE_PATH!r}, "temp_output_dir": {OUTPUT_DIR!r}}}


def _thyme_outputs(code, printed, had_processed):
    folder = {OUTPUT_DIR!r}
    paths = []
    value = _thyme_locals.get("processed_path")
    if not had_processed and isinstance(value, str) and value.startswith(folder) and \
_os.path.isfile(value):
        paths.append(value)
    if printed:
        in_folder = _re.findall({_IN_FOLDER!r}, printed)
        for path in in_folder:
            if _os.path.isfile(path) and path not in paths:
                paths.append(path)
        if not paths:
            files = [p for ext in ("jpg", "jpeg", "png", "bmp", "gif", "tiff")
                     for p in _glob.glob(_os.path.join(folder, "*." + ext))]
            anywhere = _re.findall({_ANYWHERE!r}, printed)
            if len(in_folder) == len(files) or len(anywhere) == len(files):
                paths = files
        if not paths and folder not in code:
            return {{"text": printed}}
    if not paths:
        raise RuntimeError("the code produced no image path or result")
    return {{"paths": paths}}


def _thyme_step(code, fresh):
    if fresh:
        _thyme_fresh()
    had_processed = "processed_path" in _thyme_locals
    namespace = _thyme_globals()
    printed = _io.StringIO()
    with _contextlib.redirect_stdout(printed):
        exec(code, namespace, _thyme_locals)
    outputs = _thyme_outputs(code, printed.getvalue().strip(), had_processed)
    for name in [n for n in _thyme_locals if n in namespace]:
        del _thyme_locals[name]
    for path in outputs.get("paths", ()):
        Image.open(path).show()
    print({_MARK!r} + _json.dumps(outputs), file=_sys.stderr)


from PIL import Image
_thyme_fresh()
"""


class ThymeRunner:
    """Thyme's tool on the caller's sandbox: `PRELUDE` first, then each snippet refused or
    `prepare`d and run by ``_thyme_step``; the result holds the step's outputs only (the images
    as shown to the model, or the printed text as ``stdout``)."""

    def __init__(self, runner: CodeRunner, image_size: tuple[int, int]) -> None:
        self.runner, self.image_size = runner, image_size
        self.started = False

    def _program(self, action: str) -> str | None:
        fresh = action.startswith(NEW_ATTEMPT)
        code = action.removeprefix(NEW_ATTEMPT)
        if is_refused(code):
            return None
        return f"_thyme_step({prepare(code, self.image_size)!r}, {fresh})"

    def run(self, action: str) -> ExecResult:
        if not self.started:
            self.started = True
            self.runner.run(PRELUDE)
        program = self._program(action)
        return _REFUSED if program is None else outputs_of(self.runner.run(program))

    async def arun(self, action: str) -> ExecResult:
        if not self.started:
            self.started = True
            await self.runner.arun(PRELUDE)
        program = self._program(action)
        return _REFUSED if program is None else outputs_of(await self.runner.arun(program))

    def close(self) -> None:
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()


_REFUSED = ExecResult(
    ExecStatus.ERROR,
    error=ExecError("Refused", "the code contains a call the tool refuses (sys., os.remove, ...)"),
)


def outputs_of(result: ExecResult) -> ExecResult:
    """The step's outputs: its images (the last ones shown, as many as it listed) or its text."""
    if not result.ok:
        return result
    marks = [line for line in result.stderr.splitlines() if line.startswith(_MARK)]
    if not marks:
        return ExecResult(
            ExecStatus.ERROR, error=ExecError("NoOutput", "the step reported no outputs")
        )
    outputs = json.loads(marks[-1].removeprefix(_MARK))
    if "text" in outputs:
        return ExecResult(ExecStatus.OK, stdout=outputs["text"], duration_s=result.duration_s)
    shown = [i for i in result.images if i.origin == "Image.show"][-len(outputs["paths"]) :]
    return ExecResult(ExecStatus.OK, images=tuple(shown), duration_s=result.duration_s)


__all__ = ["IMAGE_PATH", "PRELUDE", "ThymeRunner", "clamp_box", "is_refused", "prepare"]
