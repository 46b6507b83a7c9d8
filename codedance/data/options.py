"""The settings of ``codedance data import``, ``verify`` and ``stats`` as trees for the one
loader (`codedance.config`: ``-c FILE.yaml``, ``key=value``, ``--print-config``); the command
line's flags are sugar for their keys. Numbers out of range are refused at load (`bounded`),
before any row is read or a sandbox started.
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.config import bounded, not_resumed
from codedance.errors import SettingsError
from codedance.rollout import EXEC_TIMEOUT_S


@dataclass(frozen=True)
class VerifyConfig:
    """``codedance data verify``: re-execute an import folder's trajectories in the sandbox."""

    out: str = ""  # the codedance-sft import folder
    concurrency: int = not_resumed(2, at_least=1)  # trajectories (and sandbox steps) at once
    tolerance: float = bounded(
        0.02, at_least=0, at_most=1
    )  # mean absolute pixel difference allowed
    timeout_s: float = bounded(EXEC_TIMEOUT_S, above=0)  # seconds per snippet (the release: 15)
    limit: int | None = bounded(
        None, at_least=1
    )  # verify (import: read) at most this many new rows

    def check(self) -> None:
        if not self.out:
            raise SettingsError("give the import folder: codedance data verify DIR (or out=DIR)")
        _check_limit(self.limit)


@dataclass(frozen=True)
class SftImportConfig(VerifyConfig):
    """``codedance data import codedance-sft``: the parquet files, the output folder and, with
    ``verify``, the re-execution's settings (``limit`` bounds the import; the verification then
    covers every imported row)."""

    paths: tuple[str, ...] = ()  # parquet files or folders (the dataset's data/)
    verify: bool = False

    def check(self) -> None:
        _check_import(self.paths, self.out)
        _check_limit(self.limit)


@dataclass(frozen=True)
class RlImportConfig:
    """``codedance data import codedance-rl``."""

    paths: tuple[str, ...] = ()
    out: str = ""
    val_fraction: float = bounded(
        0.005, at_least=0
    )  # share of rows held out for val.parquet (by key hash)
    limit: int | None = bounded(None, at_least=1)  # import at most this many new rows

    def check(self) -> None:
        _check_import(self.paths, self.out)
        _check_limit(self.limit)
        if self.val_fraction >= 1:
            raise SettingsError(
                f"--val-fraction must be at least 0 and below 1, got {self.val_fraction}"
            )


@dataclass(frozen=True)
class StatsConfig:
    """``codedance data stats``: tables of an import folder and a histogram PNG."""

    out: str = ""  # the import folder (codedance-sft or codedance-rl)
    png: str = ""  # the histogram file; '' writes OUT/stats.png

    def check(self) -> None:
        if not self.out:
            raise SettingsError("give the import folder: codedance data stats DIR (or out=DIR)")


def _check_import(paths: tuple[str, ...], out: str) -> None:
    if not paths or not out:
        raise SettingsError(
            "give the parquet files and the output folder: PATH... --out DIR "
            "(or paths=[...] out=DIR)"
        )


def _check_limit(limit: object) -> None:
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
        raise SettingsError(f"limit: expected a whole number, got {limit!r}")
