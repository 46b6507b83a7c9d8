"""The wire format between the controller and the processes in the jail.

A message is one JSON object plus zero or more binary blobs (PNG images), framed as::

    u32 header length | header JSON (UTF-8) | blob 0 | blob 1 | ...

where the header carries ``"_blobs": [len0, len1, ...]``. JSON only: nothing from a sandbox is
ever unpickled. Receivers bound the total size and, on the controller's side, read the sender's
pid from ``SCM_CREDENTIALS`` (the kernel translates it into the receiver's PID namespace, so a
process in the jail cannot lie about who it is).

Written by hand because no library frames JSON plus blobs with peer credentials over a unix
socket; it is about a hundred lines.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from dataclasses import dataclass

from codedance.types import ExecError, ExecResult, ExecStatus, Image

_HEADER = struct.Struct(">I")
_UCRED = struct.Struct("iII")  # pid, uid, gid
MAX_HEADER_BYTES = 16 << 20


class ProtocolError(Exception):
    """The peer sent something malformed, too large, or closed the connection."""


class PeerClosed(ProtocolError):
    """The peer closed its end of the socket (its process is gone)."""


class ReceiveTimeout(ProtocolError):
    """No complete message arrived before the deadline."""


class Interrupted(ProtocolError):
    """The reader's interrupt descriptor turned readable (the sandbox is being closed)."""


@dataclass(frozen=True)
class Message:
    body: dict
    blobs: tuple[bytes, ...] = ()
    sender_pid: int | None = None  # from SCM_CREDENTIALS, when the socket has SO_PASSCRED


def encode(body: dict, blobs: tuple[bytes, ...] | list[bytes] = ()) -> bytes:
    header = dict(body)
    header["_blobs"] = [len(blob) for blob in blobs]
    raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace")
    return b"".join([_HEADER.pack(len(raw)), raw, *blobs])


def send(sock: socket.socket, body: dict, blobs: tuple[bytes, ...] | list[bytes] = ()) -> None:
    sock.sendall(encode(body, blobs))


def wait_readable(fd: int, deadline: float | None) -> bool:
    """Wait until ``fd`` is readable (or hung up); False at the deadline."""
    return bool(wait_any((fd,), deadline))


def wait_any(fds: tuple[int, ...], deadline: float | None) -> set[int]:
    """The descriptors among ``fds`` that are readable (or hung up); empty at the deadline.
    poll, not select: a controller with thousands of sandboxes has descriptors above 1024."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    timeout_ms = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
    return {fd for fd, _ in poller.poll(timeout_ms)}


class Reader:
    """Reads framed messages from one socket, keeping any bytes that belong to the next one.

    With ``interrupt_fd``, a wait for bytes ends with `Interrupted` as soon as that descriptor
    turns readable (another thread's way to stop a blocked receive without closing the socket).
    """

    def __init__(self, sock: socket.socket, *, max_bytes: int, with_credentials: bool = False,
                 interrupt_fd: int | None = None):
        self.sock = sock
        self.interrupt_fd = interrupt_fd
        self.max_bytes = max_bytes
        self.with_credentials = with_credentials
        self._buffer = bytearray()
        self._pids: list[tuple[int, int | None]] = []  # (offset in buffer, sender pid)
        if with_credentials:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def receive(self, deadline: float | None = None) -> Message:
        """Block until one whole message is here or ``deadline`` (time.monotonic) passes."""
        header_len = self._fill(_HEADER.size, deadline)
        (length,) = _HEADER.unpack(header_len)
        if length > MAX_HEADER_BYTES:
            raise ProtocolError(f"message header of {length} bytes exceeds {MAX_HEADER_BYTES}")
        pid = self._pids[0][1] if self._pids else None
        raw = self._fill(_HEADER.size + length, deadline)[_HEADER.size :]
        try:
            header = json.loads(raw.decode("utf-8"))
            sizes = [int(n) for n in header.pop("_blobs")]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed message header: {exc}") from exc
        total = _HEADER.size + length + sum(sizes)
        if total > self.max_bytes:
            raise ProtocolError(f"message of {total} bytes exceeds the limit of {self.max_bytes}")
        data = bytes(self._fill(total, deadline))
        self._consume(total)
        blobs, offset = [], _HEADER.size + length
        for size in sizes:
            blobs.append(data[offset : offset + size])
            offset += size
        return Message(body=header, blobs=tuple(blobs), sender_pid=pid)

    def forget_buffered(self) -> None:
        """Drop bytes already read but not yet returned (a forked child now owns them)."""
        self._buffer.clear()
        self._pids = []

    def _consume(self, n: int) -> None:
        """Drop the first ``n`` bytes; the chunk that now covers offset 0 keeps its sender."""
        del self._buffer[:n]
        covering = [(0, pid) for off, pid in self._pids if off <= n][-1:]
        later = [(off - n, pid) for off, pid in self._pids if off > n]
        self._pids = (covering + later) if self._buffer else []

    def _fill(self, n: int, deadline: float | None) -> bytes:
        watched = (self.sock.fileno(),) if self.interrupt_fd is None else (self.sock.fileno(), self.interrupt_fd)
        while len(self._buffer) < n:
            ready = wait_any(watched, deadline)
            if not ready:
                raise ReceiveTimeout(f"no message within the deadline ({len(self._buffer)} bytes)")
            if self.interrupt_fd in ready:
                raise Interrupted("the receive was interrupted")
            self._read_some()
        return bytes(self._buffer[:n])

    def _read_some(self) -> None:
        want = 1 << 20
        if self.with_credentials:
            data, ancdata, _, _ = self.sock.recvmsg(want, socket.CMSG_SPACE(_UCRED.size))
            pid = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = _UCRED.unpack(payload[: _UCRED.size])[0]
            if data:
                self._pids.append((len(self._buffer), pid))
        else:
            data = self.sock.recv(want)
        if not data:
            raise PeerClosed("the process at the other end of the socket has gone")
        self._buffer += data


def result_from_message(message: Message) -> ExecResult:
    """A step's ``result`` message as an `ExecResult` (an unknown status reads as crashed)."""
    body = message.body
    images = tuple(
        Image.from_png(blob, origin=str(meta.get("source", "")))
        for blob, meta in zip(message.blobs, body.get("images", []))
    )
    error = body.get("error")
    try:
        status = ExecStatus(body.get("status"))
    except ValueError:
        status = ExecStatus.CRASHED
    return ExecResult(
        status=status, stdout=str(body.get("stdout", "")), stderr=str(body.get("stderr", "")),
        error=ExecError(type=str(error["type"]), message=str(error["message"]),
                        traceback=str(error.get("traceback", "")),
                        frames=tuple((int(n), str(s)) for n, s in error.get("frames", []))) if error else None,
        images=images, notes=tuple(str(n) for n in body.get("notes", [])),
    )  # fmt: skip
