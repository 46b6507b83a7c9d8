"""Who a client is: peer credentials on the Unix socket, a bearer token over TCP.

On the Unix socket the kernel says who connected (``SO_PEERCRED``: uid, gid, pid at
``connect``; ``SO_PEERGROUPS``: the supplementary groups), so nothing the client sends is
trusted for identity. Over TCP the client shows a token from the operator's token file; tokens
are compared in constant time.
"""

from __future__ import annotations

import grp
import hmac
import os
import pwd
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from codedance.errors import SettingsError

SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)  # Linux >= 4.13
MAX_PEER_GROUPS = 256  # Python's getsockopt takes buffers of at most 1,024 bytes


@dataclass(frozen=True)
class Peer:
    """A local process at the other end of the Unix socket."""

    uid: int
    gid: int
    pid: int
    groups: tuple[int, ...]


def peer_of(sock: socket.socket) -> Peer:
    """The credentials the kernel recorded when ``sock``'s peer connected."""
    pid, uid, gid = struct.unpack(
        "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    )
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * MAX_PEER_GROUPS)
        groups = struct.unpack(f"{len(raw) // 4}I", raw)
    except OSError:  # more groups than that, or a kernel before 4.13: the primary group only
        groups = ()
    return Peer(uid=uid, gid=gid, pid=pid, groups=tuple(groups))


def not_allowed(uid: int) -> str:
    """The one line a uid outside the allow-lists is answered."""
    return (
        f"uid {uid} is not allowed to use this sandbox service: "
        "ask its operator to add it (--allow-user/--allow-group)"
    )


def uid_of(name: str) -> int:
    """A user name or number as a uid; a one-line error for an unknown name."""
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise SettingsError(f"--allow-user {name!r}: no such user on this host") from None


def gid_of(name: str) -> int:
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise SettingsError(f"--allow-group {name!r}: no such group on this host") from None


@dataclass(frozen=True)
class LocalPolicy:
    """Which local users may use the service: the service's own uid, root, and the allow-lists."""

    uids: frozenset[int]
    gids: frozenset[int]

    def admits(self, peer: Peer) -> bool:
        return (peer.uid in (0, os.geteuid()) or peer.uid in self.uids
                or bool(self.gids & {peer.gid, *peer.groups}))  # fmt: skip


@dataclass(frozen=True)
class Tokens:
    """The bearer tokens of TCP clients, by client name (one ``NAME TOKEN`` per line)."""

    by_name: dict[str, bytes]

    @classmethod
    def read(cls, path: Path) -> Tokens:
        try:
            mode, text = path.stat().st_mode, path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"--token-file {path}: cannot read it ({exc})") from None
        if mode & 0o077:
            raise SettingsError(f"--token-file {path}: readable by others (chmod 600 {path})")
        names: dict[str, bytes] = {}
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split()
            if not fields or line.lstrip().startswith("#"):
                continue
            if len(fields) != 2 or len(fields[1]) < 16:
                raise SettingsError(
                    f"--token-file {path}:{number}: expected 'NAME TOKEN' with a token of "
                    "at least 16 characters (e.g. from `openssl rand -hex 32`)"
                )
            names[fields[0]] = fields[1].encode()
        if not names:
            raise SettingsError(f"--token-file {path}: no 'NAME TOKEN' line")
        return cls(names)

    def name_of(self, authorization: str | None) -> str | None:
        """The client name whose token the ``Authorization`` header shows, or None."""
        if not authorization or not authorization.startswith("Bearer "):
            return None
        shown = authorization[len("Bearer ") :].strip().encode()
        found = None
        for name, token in self.by_name.items():  # every token compared: the time says nothing
            if hmac.compare_digest(shown, token):
                found = name
        return found
