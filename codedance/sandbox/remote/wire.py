"""What crosses the wire between the sandbox service and its clients: msgpack, bytes as bytes.

A step's result carries PNG images of up to ``Limits.max_image_bytes`` (48 MiB by default):
msgpack keeps them binary (JSON would need base64, a third larger and a copy on each side), and
its C codec packs a trivial result in microseconds. Everything here is plain data: the codec
builds `ExecResult`, `Limits` and `Isolation` back from their fields and nothing else.
"""

from __future__ import annotations

import dataclasses

import msgpack

from codedance.errors import SettingsError
from codedance.sandbox.isolation import Isolation
from codedance.sandbox.layout import Limits
from codedance.sandbox.service import URL_ENV  # noqa: F401  (re-exported: the client's names in one place)
from codedance.types import ExecError, ExecResult, ExecStatus, Image

CONTENT_TYPE = "application/msgpack"
TOKEN_ENV = "CODEDANCE_SANDBOX_TOKEN"  # the bearer token for a service reached over TCP
CA_ENV = (
    "CODEDANCE_SANDBOX_CA"  # a CA bundle that signed an https service's certificate (a private CA)
)


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack(data: bytes) -> object:
    return msgpack.unpackb(data, raw=False, strict_map_key=True)


def result_fields(result: ExecResult) -> dict:
    error = result.error
    return {
        "status": result.status.value,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "error": None
        if error is None
        else {
            "type": error.type,
            "message": error.message,
            "traceback": error.traceback,
            "frames": list(error.frames),
        },
        "images": [
            {"png": i.png, "origin": i.origin, "width": i.width, "height": i.height}
            for i in result.images
        ],
        "duration_s": result.duration_s,
        "rolled_back": result.rolled_back,
        "notes": list(result.notes),
        "executed_nothing": result.executed_nothing,
    }


def result_from(fields: dict) -> ExecResult:
    """The `ExecResult` of `result_fields`, images' PNG bytes as they were.

    >>> size = (3).to_bytes(4, "big") + (2).to_bytes(4, "big")
    >>> png = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + size
    >>> error = ExecError("ValueError", "x", "tb", ((1, "raise"),))
    >>> sent = ExecResult(ExecStatus.ERROR, stdout="a", error=error,
    ...                   images=(Image.from_png(png, "turn:0:0"),), notes=("n",), rolled_back=True)
    >>> result_from(unpack(pack(result_fields(sent)))) == sent
    True
    """
    error = fields["error"]
    return ExecResult(
        status=ExecStatus(fields["status"]),
        stdout=fields["stdout"],
        stderr=fields["stderr"],
        error=None
        if error is None
        else ExecError(
            error["type"],
            error["message"],
            error["traceback"],
            tuple((int(n), str(s)) for n, s in error["frames"]),
        ),
        images=tuple(
            Image(png=i["png"], origin=i["origin"], width=i["width"], height=i["height"])
            for i in fields["images"]
        ),
        duration_s=float(fields["duration_s"]),
        rolled_back=bool(fields["rolled_back"]),
        notes=tuple(fields["notes"]),
        executed_nothing=bool(fields["executed_nothing"]),
    )


def limits_fields(limits: Limits) -> dict:
    return dataclasses.asdict(limits)


def limits_from(fields: dict) -> Limits:
    """`Limits` from a client's fields; unknown names or bad values raise `SettingsError` (a
    ValueError, one line).

    >>> limits_from({"memory": 64 << 20}).memory
    67108864
    >>> limits_from({"memroy": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    codedance.errors.SettingsError: unknown Limits fields ['memroy']; known: ['cpus', ...]
    """
    if not isinstance(fields, dict):
        raise TypeError("limits must be a map of Limits fields")
    known = {f.name for f in dataclasses.fields(Limits)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise SettingsError(f"unknown Limits fields {unknown}; known: {sorted(known)}")
    return Limits(**fields)


def limits_from_pairs(pairs: list[str], option: str = "--ceiling") -> Limits:
    """`Limits` from a command line's ``NAME=VALUE`` texts, the rest at their defaults; a pair
    that is not one is a `SettingsError` naming ``option`` and the pair."""
    defaults, fields = Limits(), {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        number = float if isinstance(getattr(defaults, name, 0), float) else int
        try:
            if not sep:
                raise ValueError("expected NAME=VALUE")
            fields[name] = number(value)
        except ValueError as exc:
            raise SettingsError(f"{option} {pair!r}: {exc}") from None
    return limits_from(fields)


def isolation_fields(isolation: Isolation) -> dict:
    return dataclasses.asdict(isolation)


def isolation_from(fields: dict) -> Isolation:
    return Isolation(**{**fields, "missing": tuple(tuple(m) for m in fields["missing"]),
                        "notes": tuple(fields["notes"])})  # fmt: skip
