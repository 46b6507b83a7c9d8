"""The wire format between the controller and the processes in the jail, read defensively.

A message is one JSON object plus zero or more binary blobs (PNG images), framed as::

    u32 header length | header JSON (UTF-8) | blob 0 | blob 1 | ...

where the header carries ``"_blobs": [len0, len1, ...]``. JSON only: nothing from a sandbox is
ever unpickled.

The controller's side treats every byte from the jail as hostile:
- **Senders are told apart by the kernel.** With ``SCM_CREDENTIALS`` each chunk carries its
  sender's pid (translated into the receiver's PID namespace: a process cannot lie about it), and
  the `Reader` keeps one buffer per sender, so a step that writes garbage cannot desynchronise the
  holder's stream. Each sender has a byte budget (``budget(pid)``; 0 drops its bytes unread).
- **Sizes are checked before anything is allocated**: the header length against the budget, the
  declared blob sizes against it before the blobs are read.
- **Any decoding failure is one error**, `BadMessage`, naming the sender; its buffered bytes are
  dropped and its later bytes ignored until `forget` (the controller kills the sender first).
- **Descriptors are refused.** The controller's end of each sandbox's socket has
  ``SO_PASSRIGHTS`` off (Linux 6.16+, `refuse_passed_descriptors`): a step's ``SCM_RIGHTS`` fails
  with ``EPERM`` in the step, where before the kernel dropped them at the controller's receive and
  released the files (inotify groups, big memfds) on the controller's thread.
- `parse_result` checks a step's result against a typed schema and the sandbox's bounds (text
  lengths, note count, image count, PNG header, pixels and bytes): anything the honest runtime
  never sends is a `BadMessage`.

Written by hand because no library frames JSON plus blobs with per-sender peer credentials over
a unix socket.
"""

from __future__ import annotations

import errno
import json
import math
import platform
import select
import socket
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from codedance.types import ExecError, ExecResult, ExecStatus, Image, png_size

_HEADER = struct.Struct(">I")
_POLL_MS_MAX = (1 << 31) - 1
_UCRED = struct.Struct("iII")  # pid, uid, gid
MAX_HEADER_BYTES = 1 << 20
MAX_BLOBS = 64
MAX_PNG_CHUNKS = 4096  # PIL writes 64 KiB IDAT chunks: far more than a 48 MiB PNG needs
READ_CHUNK = 1 << 20
# SO_PASSRIGHTS, Linux 6.16+ (include/uapi/asm-generic/socket.h: 83): 0 makes the kernel refuse
# (EPERM, at the sender's sendmsg) every SCM_RIGHTS sent to the socket. Alpha, MIPS, PA-RISC and
# SPARC number their socket options differently: not set there.
SO_PASSRIGHTS = getattr(socket, "SO_PASSRIGHTS", None) or (
    None if platform.machine().startswith(("alpha", "mips", "parisc", "sparc")) else 83
)


class ProtocolError(Exception):
    """The peer sent something malformed, too large, or closed the connection."""


class PeerClosed(ProtocolError):
    """The peer closed its end of the socket (its process is gone)."""


class ReceiveTimeout(ProtocolError):
    """No complete message arrived before the deadline."""


class Interrupted(ProtocolError):
    """The reader's interrupt descriptor turned readable (the sandbox is being closed)."""


class BadMessage(ProtocolError):
    """A sender broke the protocol (framing, JSON, schema or a bound)."""

    def __init__(self, sender_pid: int | None, reason: str):
        super().__init__(reason)
        self.sender_pid = sender_pid


@dataclass(frozen=True)
class Message:
    body: dict
    blobs: tuple[bytes, ...] = ()
    sender_pid: int | None = None  # from SCM_CREDENTIALS, when the socket has SO_PASSCRED

    @property
    def op(self) -> object:
        return self.body.get("op")


def encode(body: dict, blobs: tuple[bytes, ...] | list[bytes] = ()) -> bytes:
    header = dict(body)
    header["_blobs"] = [len(blob) for blob in blobs]
    raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return b"".join([_HEADER.pack(len(raw)), raw, *blobs])


class SendTimeout(ProtocolError):
    """The peer did not take the message before the deadline (it stopped reading)."""


def refuse_passed_descriptors(sock: socket.socket) -> bool:
    """Have the kernel refuse descriptors sent to ``sock`` (``SO_PASSRIGHTS`` 0); whether it
    took (False on kernels before 6.16, which answer ENOPROTOOPT or EINVAL: there the passed
    descriptors are dropped at the receive, as before)."""
    if SO_PASSRIGHTS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_PASSRIGHTS, 0)
    except OSError as exc:
        if exc.errno in (errno.ENOPROTOOPT, errno.EINVAL):
            return False
        raise
    return True


def header_bytes(message: bytes) -> int:
    """How many bytes of ``message`` (from `encode`) its header takes: over ``MAX_HEADER_BYTES``,
    the receiving side refuses the stream."""
    return _HEADER.unpack_from(message)[0]


def send(
    sock: socket.socket,
    body: dict,
    blobs: tuple[bytes, ...] | list[bytes] = (),
    deadline: float | None = None,
    interrupt_fd: int | None = None,
) -> None:
    """Send one message whole, by ``deadline`` (`SendTimeout`), on a blocking or non-blocking
    socket; a wait ends with `Interrupted` as soon as ``interrupt_fd`` turns readable."""
    send_encoded(sock, encode(body, blobs), deadline, interrupt_fd)


def send_encoded(
    sock: socket.socket,
    message: bytes,
    deadline: float | None = None,
    interrupt_fd: int | None = None,
) -> None:
    """`send` for a message already encoded (`encode`)."""
    data = memoryview(message)
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLOUT)
    if interrupt_fd is not None:
        poller.register(interrupt_fd, select.POLLIN)
    while data:
        try:
            data = data[sock.send(data) :]
            continue
        except BlockingIOError:
            pass
        timeout_ms = _poll_ms(deadline)
        if timeout_ms == 0:
            raise SendTimeout("the peer stopped reading")
        if any(fd == interrupt_fd for fd, _ in poller.poll(timeout_ms)):
            raise Interrupted("the send was interrupted")


def _poll_ms(deadline: float | None) -> int | None:
    """``poll()``'s timeout until ``deadline``: None (no deadline), 0 once past it, else at least
    1 and at most what its int argument holds."""
    if deadline is None:
        return None
    return min(max(0, math.ceil((deadline - time.monotonic()) * 1000)), _POLL_MS_MAX)


def wait_readable(fd: int, deadline: float | None) -> bool:
    """Wait until ``fd`` is readable (or hung up); False at the deadline."""
    return bool(wait_any((fd,), deadline))


def wait_any(fds: tuple[int, ...], deadline: float | None) -> set[int]:
    """The descriptors among ``fds`` that are readable (or hung up); empty at the deadline.
    poll, not select: a controller with thousands of sandboxes has descriptors above 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return {fd for fd, _ in poller.poll(_poll_ms(deadline))}


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def decode_header(raw: bytes) -> tuple[dict, list[int]]:
    """The header's JSON object and its blob sizes; ValueError for anything else."""
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except Exception as exc:  # noqa: BLE001 - RecursionError, OverflowError, UnicodeError, ...
        raise ValueError(f"malformed header: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")  # noqa: TRY004 - malformed wire data
    sizes = header.pop("_blobs", None)
    if not isinstance(sizes, list) or len(sizes) > MAX_BLOBS:
        raise ValueError("the header's blob list is missing or too long")
    if not all(type(n) is int and 0 <= n < 1 << 40 for n in sizes):
        raise ValueError("the header's blob sizes are not small non-negative integers")
    return header, sizes


class Reader:
    """Reads framed messages from one socket, one buffer per sender.

    ``budget(pid)``: the most bytes a message of that sender may have (0: its bytes are dropped
    unread); without credentials there is one sender, ``None``, with ``max_bytes``.
    With ``interrupt_fd``, a wait ends with `Interrupted` as soon as that descriptor turns
    readable (another thread's way to stop a blocked receive without closing the socket).
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        max_bytes: int,
        with_credentials: bool = False,
        interrupt_fd: int | None = None,
        budget: Callable[[int | None], int] | None = None,
    ):
        self.sock = sock
        self.interrupt_fd = interrupt_fd
        self.max_bytes = max_bytes
        self.with_credentials = with_credentials
        self.budget = budget or (lambda _pid: max_bytes)
        self.dropped_bytes = 0
        self._buffers: dict[int | None, bytearray] = {}
        self._headers: dict[
            int | None, tuple[dict, int]
        ] = {}  # parsed, awaiting blobs: (header, total)
        self._ignored: set[int | None] = set()
        if with_credentials:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    @property
    def senders_buffered(self) -> int:
        return len(self._buffers)

    def receive(self, deadline: float | None = None) -> Message:
        """The next whole message from any sender, by ``deadline`` (time.monotonic), however busy
        the socket is kept by senders whose bytes are dropped."""
        while True:
            for pid in list(self._buffers):
                message = self._take(pid)
                if message is not None:
                    return message
            if deadline is not None and time.monotonic() > deadline:
                raise ReceiveTimeout("no message within the deadline")
            watched = (
                (self.sock.fileno(),)
                if self.interrupt_fd is None
                else (self.sock.fileno(), self.interrupt_fd)
            )
            ready = wait_any(watched, deadline)
            if not ready:
                raise ReceiveTimeout("no message within the deadline")
            if self.interrupt_fd in ready:
                raise Interrupted("the receive was interrupted")
            self._read_some()

    def forget(self, pid: int | None) -> None:
        """Drop a sender's buffered bytes and stop ignoring it (its process is gone)."""
        self._buffers.pop(pid, None)
        self._headers.pop(pid, None)
        self._ignored.discard(pid)

    def forget_others(self, keep: set[int | None]) -> None:
        """Drop the buffered bytes of every sender not in ``keep`` and forget whom to ignore
        (a new step begins: any other sender's bytes are dropped by its budget anyway)."""
        for pid in [p for p in self._buffers if p not in keep]:
            self._buffers.pop(pid, None)
            self._headers.pop(pid, None)
        self._ignored &= keep

    def forget_buffered(self) -> None:
        """Drop every byte already read but not yet returned (a forked child now owns them)."""
        self._buffers.clear()
        self._headers.clear()

    def _take(self, pid: int | None) -> Message | None:
        buffer = self._buffers[pid]
        if pid in self._headers:  # parsed once already, waiting for its blobs
            header, total = self._headers[pid]
            if len(buffer) < total:
                return None
        else:
            if len(buffer) < _HEADER.size:
                return None
            limit = self.budget(pid)
            (length,) = _HEADER.unpack_from(buffer)
            if _HEADER.size + length > min(limit, MAX_HEADER_BYTES + _HEADER.size):
                self._bad(pid, f"a message header of {length} bytes is over the limit")
            if len(buffer) < _HEADER.size + length:
                return None
            try:
                header, sizes = decode_header(bytes(buffer[_HEADER.size : _HEADER.size + length]))
            except ValueError as exc:
                self._bad(pid, str(exc))
            total = _HEADER.size + length + sum(sizes)
            if total > limit:
                self._bad(pid, f"a message of {total} bytes is over the limit of {limit}")
            header["_blobs"] = sizes
            if len(buffer) < total:
                self._headers[pid] = (header, total)
                return None
        self._headers.pop(pid, None)
        sizes = header.pop("_blobs")
        length = total - sum(sizes) - _HEADER.size
        blobs, offset = [], _HEADER.size + length
        for size in sizes:
            blobs.append(bytes(buffer[offset : offset + size]))
            offset += size
        del buffer[:total]
        if not buffer:
            del self._buffers[pid]
        return Message(body=header, blobs=tuple(blobs), sender_pid=pid)

    def _bad(self, pid: int | None, reason: str) -> None:
        self._buffers.pop(pid, None)
        self._headers.pop(pid, None)
        self._ignored.add(pid)
        raise BadMessage(pid, reason)

    def _read_some(self) -> None:
        pid = None
        try:
            if self.with_credentials:
                data, ancdata, _, _ = self.sock.recvmsg(READ_CHUNK, socket.CMSG_SPACE(_UCRED.size))
                for level, kind, payload in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                        pid = _UCRED.unpack(payload[: _UCRED.size])[0]
            else:
                data = self.sock.recv(READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return
            raise PeerClosed(f"the socket failed: {exc}") from exc
        if not data:
            raise PeerClosed("the process at the other end of the socket has gone")
        if pid in self._ignored or self.budget(pid) <= 0:
            self.dropped_bytes += len(data)
            return
        buffer = self._buffers.setdefault(pid, bytearray())
        buffer += data
        if len(buffer) > self.budget(pid) + READ_CHUNK:
            self._bad(pid, "a sender's buffered bytes are over the limit")


# ----------------------------------------------------------------- a step's result, checked
_STEP_STATUSES = {"ok": ExecStatus.OK, "error": ExecStatus.ERROR, "oom": ExecStatus.OOM,
                  "refused": ExecStatus.REFUSED}  # fmt: skip
_RESULT_KEYS = {"op", "status", "stdout", "stderr", "images", "notes", "error", "executed_nothing"}
MAX_NOTES = 16
NOTE_CHARS = 1000
ERROR_TYPE_CHARS = 200
MAX_FRAMES = 10


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")  # noqa: TRY004 - malformed wire data
    if len(value) > limit:
        raise ValueError(f"{what} has {len(value)} characters, over its bound of {limit}")
    try:
        value.encode(
            "utf-8"
        )  # JSON escapes can carry lone surrogates, which nothing downstream can write
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode (a lone surrogate)") from None
    return value


def parse_result(message: Message, limits) -> ExecResult:
    """A step's ``result`` message as an `ExecResult`, checked against the schema and ``limits``
    (a `codedance.sandbox.Limits`); raises `BadMessage` for anything the runtime never sends."""
    try:
        return _parse_result(message, limits)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadMessage(
            message.sender_pid, f"the step's result broke the protocol: {exc}"
        ) from None


def _parse_result(message: Message, limits) -> ExecResult:
    body = message.body
    if set(body) - _RESULT_KEYS:
        raise ValueError(f"unknown fields {sorted(set(body) - _RESULT_KEYS)[:5]}")
    status = _STEP_STATUSES[_text(body.get("status"), "status", 20)]
    stream_chars = (
        limits.output_head + limits.output_tail + 200
    )  # the head, the tail and the cut marker
    stdout = _text(body.get("stdout", ""), "stdout", stream_chars)
    stderr = _text(body.get("stderr", ""), "stderr", stream_chars)
    notes = body.get("notes", [])
    if not isinstance(notes, list) or len(notes) > MAX_NOTES:
        raise ValueError("notes is not a short list")
    notes = tuple(_text(note, "a note", NOTE_CHARS) for note in notes)
    error = _parse_error(body.get("error"), limits.error_chars)
    executed_nothing = body.get(
        "executed_nothing", False
    )  # only for a snippet the controller does not parse
    if type(executed_nothing) is not bool:
        raise ValueError("executed_nothing is not a boolean")
    meta = body.get("images", [])
    if not isinstance(meta, list) or len(meta) != len(message.blobs):
        raise ValueError("the image list does not match the blobs")
    if len(meta) > limits.max_images:
        raise ValueError(f"{len(meta)} images, over the limit of {limits.max_images}")
    if sum(len(blob) for blob in message.blobs) > limits.max_image_bytes:
        raise ValueError(f"the images are over {limits.max_image_bytes} bytes in all")
    images = []
    for blob, item in zip(message.blobs, meta):
        if not isinstance(item, dict):
            raise ValueError("an image's description is not an object")  # noqa: TRY004 - malformed wire data
        check_png_structure(blob)
        width, height = png_size(blob)
        if not (0 < width and 0 < height and width * height <= limits.max_pixels):
            raise ValueError(
                f"an image of {width}x{height} pixels is over the limit of {limits.max_pixels}"
            )
        images.append(
            Image(
                png=blob,
                origin=_text(item.get("source", ""), "an image's source", NOTE_CHARS),
                width=width,
                height=height,
            )
        )
    return ExecResult(
        status=status,
        stdout=stdout,
        stderr=stderr,
        error=error,
        images=tuple(images),
        notes=notes,
        executed_nothing=executed_nothing,
    )


def check_png_structure(data: bytes) -> None:
    """The PNG's chunk structure without decoding anything: signature, IHDR first, every chunk's
    length and CRC, an IDAT, IEND last. Raises ValueError. The pixels are decoded only by whoever
    shows the image (outside the controller: it never runs an image decoder on jail data)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not PNG data: no PNG signature")
    offset, kinds = 8, []
    while offset < len(data):
        if len(kinds) >= MAX_PNG_CHUNKS:
            raise ValueError(f"a PNG of more than {MAX_PNG_CHUNKS} chunks")
        if offset + 12 > len(data):
            raise ValueError("a PNG chunk is cut short")
        (length,) = _HEADER.unpack_from(data, offset)
        kind = data[offset + 4 : offset + 8]
        end = offset + 8 + length
        if (
            end + 4 > len(data)
            or zlib.crc32(data[offset + 4 : end]) != _HEADER.unpack_from(data, end)[0]
        ):
            raise ValueError("a PNG chunk is cut short or fails its CRC")
        kinds.append(kind)
        offset = end + 4
        if kind == b"IEND":
            break
    if (
        not kinds
        or kinds[0] != b"IHDR"
        or kinds[-1] != b"IEND"
        or b"IDAT" not in kinds
        or offset != len(data)
    ):
        raise ValueError("not a well-formed PNG (IHDR first, IDAT, IEND last)")


def _parse_error(error: object, error_chars: int) -> ExecError | None:
    if error is None:
        return None
    if not isinstance(error, dict):
        raise ValueError("error is not an object")  # noqa: TRY004 - malformed wire data
    frames = error.get("frames", [])
    if not isinstance(frames, list) or len(frames) > MAX_FRAMES:
        raise ValueError("the error's frames are not a short list")
    parsed = []
    for frame in frames:
        if not (
            isinstance(frame, list)
            and len(frame) == 2
            and type(frame[0]) is int
            and abs(frame[0]) < 1 << 31
        ):
            raise ValueError("an error frame is not [line, source]")
        parsed.append((frame[0], _text(frame[1], "an error frame", NOTE_CHARS)))
    return ExecError(type=_text(error.get("type"), "the error's type", ERROR_TYPE_CHARS),
                     message=_text(error.get("message", ""), "the error's message", error_chars),
                     traceback=_text(error.get("traceback", ""), "the traceback", 2 * error_chars),
                     frames=tuple(parsed))  # fmt: skip
