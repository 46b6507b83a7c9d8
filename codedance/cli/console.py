"""The rich console every command prints through, `user_errors`, the one error handler, and
`interrupt_on_sigterm`, which makes SIGTERM an interruption like Ctrl-C.

Off a terminal (CI logs, ``| tee``, a file) rich assumes 80 columns and cuts table cells to
"pho…"; there the console is 160 columns wide instead, unless ``COLUMNS`` says otherwise.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

PIPED_WIDTH = 160
INTERRUPTED = 130  # the exit code of an interrupted command, SIGINT (Ctrl-C) and SIGTERM alike
# control characters but newline and tab (C0, DEL, C1), shown as escapes: text a model or a
# snippet wrote could otherwise move the cursor, retitle the window or rewrite earlier lines
_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))
}


def untrusted(text: str) -> str:
    """``text`` (a model's output, a snippet's stdout) with its control characters shown as
    escapes, for a terminal; print it through rich as a `rich.text.Text` (never as markup)."""
    return text.translate(_CONTROLS)


def echo_untrusted(text: str, *, err: bool = False) -> None:
    """Echo ``text`` as it is into a file or pipe, with `untrusted`'s escapes on a terminal."""
    stream = sys.stderr if err else sys.stdout
    typer.echo(untrusted(text) if stream.isatty() else text, err=err)


def make_console(*, stderr: bool = False) -> Console:
    """The console of a command; no emoji codes (a scorer named ``rule:relaxed:`` stays text)."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
    return Console(stderr=stderr, width=width, emoji=False)


RESUMABLE = "interrupted: finished work is saved; rerun the same command to resume"


def user_errors(command: Callable[..., Any] | None = None, *, interrupted: str = RESUMABLE) -> Any:
    """Wrap a command: an error a person can act on (`codedance.errors.CodeDanceError`, the
    sandbox's `ServiceError` / `SandboxUnavailable` included) prints one line ``error: ...`` on
    stderr and exits with code 2; Ctrl-C (and SIGTERM, `interrupt_on_sigterm`) prints what was kept
    and exits with `INTERRUPTED` (130). Anything else is a bug and keeps its traceback.
    ``@user_errors(interrupted=TEXT)``: what a command that does not resume prints instead."""
    from codedance.errors import CodeDanceError

    if command is None:
        return functools.partial(user_errors, interrupted=interrupted)

    @functools.wraps(command)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CodeDanceError as exc:
            make_console(stderr=True).print(
                f"[red]error:[/red] {escape(str(exc))}", highlight=False
            )
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            make_console(stderr=True).print(interrupted, markup=False, highlight=False)
            raise typer.Exit(INTERRUPTED) from None

    return wrapped


def _as_ctrl_c(signum: int, frame: object) -> None:
    handler = signal.getsignal(signal.SIGINT)
    (handler if callable(handler) else signal.default_int_handler)(signal.SIGINT, frame)


def interrupt_on_sigterm() -> None:
    """SIGTERM (what ``timeout``, Slurm and Kubernetes send) is handled by whatever handles
    Ctrl-C at that moment: inside `asyncio.run` its runner cancels the main task (so records are
    never cut mid-write by an exception raised between two statements), elsewhere Python raises
    `KeyboardInterrupt`. The same ``finally`` blocks then close the sandboxes and keep the
    finished work, and `user_errors` exits with `INTERRUPTED`. Without this Python dies at once
    and leaves the sandbox service's folders and cgroups to the next start's sweep
    (`codedance.sandbox.leftovers`). A process that inherited SIGINT ignored (a background job)
    still stops on SIGTERM: then Python's default Ctrl-C handler runs."""
    signal.signal(signal.SIGTERM, _as_ctrl_c)
