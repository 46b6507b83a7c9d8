"""``ast.parse`` that is safe to call from several threads on every supported CPython.

CPython 3.11.5-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion depth per interpreter,
not per thread: two threads turning source into ``ast`` objects at the same moment (one of them
switched out by a finalizer the garbage collector runs mid-parse) make one raise ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905, fixed in 3.11.8 and 3.12.2). The
controller parses snippets in one thread per trajectory, and eval grades answers in worker threads,
so every parse in the package goes through one process-wide lock here. A parse of the sizes involved
takes microseconds to a few milliseconds (the controller parses at most
``execution.CONTROLLER_PARSE_CHARS``), so the lock costs nothing measurable; it is not taken on
interpreters without the bug. It is re-entrant: a finalizer that parses in the same thread must not
deadlock (that case the lock cannot help).
"""

from __future__ import annotations

import ast
import contextlib
import sys
import threading

_AFFECTED = (3, 11, 5) <= sys.version_info[:3] <= (3, 11, 7) or (3, 12, 0) <= sys.version_info[
    :3
] <= (3, 12, 1)
_LOCK = threading.RLock() if _AFFECTED else contextlib.nullcontext()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse`, never beside another thread's parse on an affected interpreter.

    >>> type(parse("x = 1")).__name__, type(parse("1 + 2", mode="eval")).__name__
    ('Module', 'Expression')
    """
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
