"""The crop boxes a snippet uses, recorded by running an instrumented copy of it in the sandbox.

A *crop* is a 2-D slice ``a[y0:y1, x0:x1, ...]`` of an array whose first two dimensions are an
input image's (height, width) (``img``, a grey copy, a mask of the same size), or
``im.crop((x0, y0, x1, y1))`` of a PIL image of an input image's size. `instrument` rewrites a
snippet's read subscripts and ``.crop`` calls into calls of `PRELUDE`'s recorders, which do the
same operation and write one ``CDBOX x0 y0 x1 y1 width height`` line to stderr per new box (the
raw bounds the code asked for, before numpy's clipping: ``None`` is the edge). `box_problem`
judges them: a box must lie inside its image (no negative or past-the-edge bound: numpy would
silently clip or wrap) and be non-degenerate (both sides at least `MIN_SIDE` pixels).

Not handled: crops of resized copies (their size is no input image's), slices with a step,
boxes computed but never used to index, crops through other libraries' calls (OpenCV ROI
structs, ``skimage.util.crop``). The instrumented copy runs only for this check; the recorded
outputs are compared against the snippet as written (`codedance.synth.verify`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codedance import python_ast

MIN_SIDE = 2
BOX_LINE = re.compile(r"^CDBOX (-?\d+) (-?\d+) (-?\d+) (-?\d+) (\d+) (\d+)$", re.MULTILINE)

PRELUDE = """
def __cd_record__(box, size):
    import sys
    key = (*box, *size)
    if key not in __cd_seen__:
        __cd_seen__.add(key)
        sys.stderr.write("CDBOX %d %d %d %d %d %d\\n" % key)

def __cd_box__(a, key):
    shape = getattr(a, "shape", None)
    if (isinstance(key, tuple) and len(key) >= 2 and isinstance(key[0], slice)
            and isinstance(key[1], slice) and key[0].step in (None, 1) and key[1].step in (None, 1)
            and shape is not None and len(shape) >= 2
            and (int(shape[1]), int(shape[0])) in __cd_sizes__):
        h, w = int(shape[0]), int(shape[1])
        ys, xs = key[0], key[1]
        bound = lambda v, edge: edge if v is None else int(v)
        box = (bound(xs.start, 0), bound(ys.start, 0), bound(xs.stop, w), bound(ys.stop, h))
        __cd_record__(box, (w, h))
    return a[key]

def __cd_crop__(im, *args, **kwargs):
    size = getattr(im, "size", None)
    if args and len(args[0]) == 4 and isinstance(size, tuple) and tuple(size) in __cd_sizes__:
        __cd_record__(tuple(int(v) for v in args[0]), tuple(size))
    return im.crop(*args, **kwargs)
"""


def prelude(sizes: tuple[tuple[int, int], ...]) -> str:
    """Sandbox code defining the recorders for input images of these (width, height) sizes."""
    return f"__cd_sizes__ = {set(sizes)!r}\n__cd_seen__ = set()\n{PRELUDE}"


class _Rewrite(ast.NodeTransformer):
    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        index = node.slice
        if (
            isinstance(node.ctx, ast.Load)
            and isinstance(index, ast.Tuple)
            and len(index.elts) >= 2
            and all(isinstance(e, ast.Slice) for e in index.elts[:2])
        ):
            elts = [
                ast.Call(
                    ast.Name("slice", ast.Load()),
                    [
                        e.lower or ast.Constant(None),
                        e.upper or ast.Constant(None),
                        e.step or ast.Constant(None),
                    ],
                    [],
                )
                if isinstance(e, ast.Slice)
                else e
                for e in index.elts
            ]
            return ast.copy_location(
                ast.Call(
                    ast.Name("__cd_box__", ast.Load()),
                    [node.value, ast.Tuple(elts, ast.Load())],
                    [],
                ),
                node,
            )
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "crop" and len(node.args) == 1:
            return ast.copy_location(
                ast.Call(
                    ast.Name("__cd_crop__", ast.Load()), [func.value, *node.args], node.keywords
                ),
                node,
            )
        return node


def instrument(code: str) -> str:
    """`code` with its crops routed through the recorders (unchanged if it does not parse)."""
    try:
        tree = python_ast.parse(code)
    except SyntaxError:
        return code
    return ast.unparse(ast.fix_missing_locations(_Rewrite().visit(tree)))


@dataclass(frozen=True)
class Box:
    """A crop's raw bounds in the pixels of an image of size (width, height)."""

    x0: int
    y0: int
    x1: int
    y1: int
    width: int
    height: int


def parse_boxes(stderr: str) -> tuple[Box, ...]:
    """The boxes the recorders wrote to `stderr`."""
    return tuple(Box(*(int(v) for v in m.groups())) for m in BOX_LINE.finditer(stderr))


def box_problem(box: Box) -> tuple[str, str] | None:
    """(reason, detail) when `box` is implausible, else None."""
    where = f"box ({box.x0}, {box.y0}, {box.x1}, {box.y1}) in a {box.width}x{box.height} image"
    if min(box.x0, box.y0, box.x1, box.y1) < 0 or box.x1 > box.width or box.y1 > box.height:
        return "box_outside", where
    if box.x1 - box.x0 < MIN_SIDE or box.y1 - box.y0 < MIN_SIDE:
        return "box_degenerate", where
    return None
