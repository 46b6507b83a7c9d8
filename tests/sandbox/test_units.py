"""Unit tests of the sandbox's parts that need no jail: wire format, atomic files, capture."""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import select
import socket
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from codedance.sandbox import protocol
from codedance.sandbox.files import (
    LimitExceeded,
    StoreBudget,
    Unkeepable,
    WorkdirSnapshot,
    remove_tree,
)
from codedance.sandbox.jail.capture import BoundedText, ImageCollector, array_to_image
from codedance.sandbox.jail.execution import describe_failure, executes_nothing, run_snippet
from codedance.sandbox.layout import Limits

pytestmark = pytest.mark.tier("integration")


def test_messages_round_trip_with_blobs_and_sender_pid():
    left, right = socket.socketpair()
    reader = protocol.Reader(right, max_bytes=1 << 20, with_credentials=True)
    protocol.send(left, {"op": "a", "text": "é"}, [b"\x00\x01", b""])
    protocol.send(left, {"op": "b"})
    first, second = reader.receive(), reader.receive()
    assert first.body == {"op": "a", "text": "é"} and first.blobs == (b"\x00\x01", b"")
    assert second.body == {"op": "b"} and first.sender_pid == second.sender_pid == os.getpid()


def test_oversized_and_malformed_messages_are_refused():
    left, right = socket.socketpair()
    protocol.send(left, {"op": "big"}, [b"x" * 5000])
    with pytest.raises(protocol.BadMessage, match="over the limit"):
        protocol.Reader(right, max_bytes=1000).receive()
    left, right = socket.socketpair()
    left.sendall(b"\x00\x00\x00\x03{x}")
    with pytest.raises(protocol.BadMessage, match="malformed"):
        protocol.Reader(right, max_bytes=1000).receive()
    left.close()
    with pytest.raises(protocol.PeerClosed):
        protocol.Reader(right, max_bytes=1000).receive()


def _frame(raw: bytes) -> bytes:
    return len(raw).to_bytes(4, "big") + raw


@pytest.mark.parametrize(
    "raw",
    [
        b"[1, 2]",
        b'{"_blobs": "x"}',
        b'{"_blobs": [-1]}',
        b'{"_blobs": [1.5]}',
        b'{"op": NaN, "_blobs": []}',
        b'{"x": Infinity, "_blobs": []}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"x": 1' + b"0" * 5000 + b', "_blobs": []}',
        b"\xff\xfe",
        b'{"_blobs": [' + b"1," * 100 + b"1]}",
        b'{"_blobs": [1099511627776]}',
    ],
)
def test_every_malformed_header_is_one_error_and_the_stream_goes_on(raw):
    """Any framing or decoding failure is a BadMessage naming the sender; other senders' streams
    (here: the next socket user) are not desynchronised."""
    left, right = socket.socketpair()
    reader = protocol.Reader(right, max_bytes=1 << 20, with_credentials=True)
    left.sendall(_frame(raw))
    with pytest.raises(protocol.BadMessage) as info:
        reader.receive(deadline=time.monotonic() + 5)
    assert info.value.sender_pid == os.getpid()
    reader.forget(os.getpid())
    protocol.send(left, {"op": "after"})
    assert reader.receive(deadline=time.monotonic() + 5).body == {"op": "after"}


def test_an_oversized_header_is_refused_before_it_is_read():
    left, right = socket.socketpair()
    left.sendall((1 << 30).to_bytes(4, "big"))
    with pytest.raises(protocol.BadMessage, match="header of 1073741824 bytes"):
        protocol.Reader(right, max_bytes=1 << 40).receive(deadline=time.monotonic() + 5)


def test_a_sender_without_budget_is_dropped_unread():
    left, right = socket.socketpair()
    reader = protocol.Reader(right, max_bytes=1 << 20, with_credentials=True, budget=lambda pid: 0)
    protocol.send(left, {"op": "ignored"}, [b"x" * 1000])
    with pytest.raises(protocol.ReceiveTimeout):
        reader.receive(deadline=time.monotonic() + 0.2)
    assert reader.dropped_bytes > 1000


def _result(**fields) -> protocol.Message:
    body = {"op": "result", "status": "ok", "stdout": "", "stderr": "", "images": [], "notes": []}
    body.update(fields)
    return protocol.Message(body=body, blobs=fields.pop("_blobs", ()), sender_pid=1)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, extra: bytes = b"") -> bytes:
    """A structurally valid PNG header for ``width``x``height`` (its pixel data is not checked)."""
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return (
        b"\x89PNG\r\n\x1a\n"
        + ihdr
        + _chunk(b"IDAT", zlib.compress(b"\x00") + extra)
        + _chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("fields,blobs,match", [
    ({"stdout": "x" * 15_700_000}, (), "stdout has"),
    ({"status": "timeout"}, (), "timeout"),
    ({"status": ["ok"]}, (), "status is not a string"),
    ({"notes": ["n"] * 100}, (), "notes"),
    ({"notes": ["x" * 100_000]}, (), "a note has"),
    ({"error": {"type": "E", "message": "m" * 9_000_000}}, (), "message has"),
    ({"error": {"type": "E", "frames": [["1", "x"]]}}, (), "frame"),
    ({"extra": 1}, (), "unknown fields"),
    ({"executed_nothing": 1}, (), "not a boolean"),
    ({"images": [{"source": "s"}] * 40}, (_png(10, 10),) * 40, "40 images"),
    ({"images": [{"source": "s"}]}, (_png(13000, 13000),), "over the limit"),
    ({"images": [{"source": "s"}]}, (_png(4, 4, b"\x00" * (49 << 20)),), "bytes in all"),
    ({"images": [{"source": "s"}]}, (b"GIF89a" + b"\x00" * 30,), "not PNG"),
    ({"images": [{"source": "s"}]}, (_png(4, 4)[:-20] + b"garbage body" * 3,), "CRC|cut short"),
    ({"images": [{"source": "s"}]}, (_png(4, 4) + b"trailing",), "well-formed"),
    ({"images": [{"source": "s"}, {"source": "t"}]}, (_png(4, 4),), "does not match"),
])  # fmt: skip
def test_a_forged_result_is_refused(fields, blobs, match):
    message = protocol.Message(
        body={"op": "result", "status": "ok", **fields}, blobs=blobs, sender_pid=7
    )
    with pytest.raises(protocol.BadMessage, match=match) as info:
        protocol.parse_result(message, Limits())
    assert info.value.sender_pid == 7


def test_an_honest_result_is_accepted():
    message = protocol.Message(
        body={
            "op": "result",
            "status": "error",
            "stdout": "hi",
            "notes": ["a"],
            "error": {"type": "ValueError", "message": "m", "frames": [[1, "x"]]},
            "images": [{"source": "plot"}],
            "executed_nothing": True,
        },
        blobs=(_png(30, 20),),
    )
    result = protocol.parse_result(message, Limits())
    assert (
        result.status.value == "error"
        and result.error.frames == ((1, "x"),)
        and result.executed_nothing
    )
    assert result.images[0].size == (30, 20) and result.images[0].origin == "plot"


def test_workdir_restore_undoes_every_kind_of_change(tmp_path):
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    (work / "keep.txt").write_text("one")
    (work / "d").mkdir()
    (work / "d" / "inner.txt").write_text("inner")
    snapshot = WorkdirSnapshot(str(work), str(store), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    (work / "keep.txt").write_text("two")
    (work / "new.txt").write_text("new")
    (work / "d" / "inner.txt").unlink()
    os.symlink("/etc/passwd", work / "link")
    os.mkfifo(work / "fifo")
    os.chmod(work / "d", 0o500)
    snapshot.restore()
    assert (work / "keep.txt").read_text() == "one"
    assert (work / "d" / "inner.txt").read_text() == "inner"
    assert sorted(os.listdir(work)) == ["d", "keep.txt"]
    (work / "keep.txt").write_text("three")
    snapshot.checkpoint()
    (work / "keep.txt").write_text("four")
    snapshot.restore()
    assert (work / "keep.txt").read_text() == "three"


def test_a_changed_file_is_restored_in_place_unless_it_has_other_links(tmp_path):
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    (work / "kept.txt").write_text("one")
    (work / "linked.txt").write_text("two")
    snapshot = WorkdirSnapshot(str(work), str(store), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    inode = os.stat(work / "kept.txt").st_ino
    with open(work / "kept.txt", "a") as kept_open:
        kept_open.write(" and more")
        kept_open.flush()
        (work / "linked.txt").write_text("changed")
        os.link(work / "linked.txt", tmp_path / "outside.txt")  # a second link: not rewritten
        snapshot.restore()
        assert (work / "kept.txt").read_text() == "one" and os.stat(
            work / "kept.txt"
        ).st_ino == inode
        kept_open.write(", then this")
    assert (work / "kept.txt").read_text() == "one, then this"
    assert (work / "linked.txt").read_text() == "two"
    assert (tmp_path / "outside.txt").read_text() == "changed"


def test_sparse_files_are_kept_sparse(tmp_path):
    """A sparse file costs the store (on the host's disk) only its data, and comes back sparse."""
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    with open(work / "sparse.bin", "wb") as handle:
        handle.write(b"head")
        handle.seek(8 << 20)
        handle.write(b"middle")
        handle.truncate(16 << 20)
    expected = (work / "sparse.bin").read_bytes()
    if os.stat(work / "sparse.bin").st_blocks * 512 > 1 << 20:
        pytest.skip("this file system does not keep holes")
    snapshot = WorkdirSnapshot(str(work), str(store), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=64 << 20)  # fmt: skip
    kept = [
        os.path.join(d, f) for d, _, names in os.walk(store) for f in names if f == "sparse.bin"
    ]
    assert kept and all(os.stat(path).st_blocks * 512 < 1 << 20 for path in kept)
    (work / "sparse.bin").write_bytes(b"overwritten")
    snapshot.restore()
    assert (work / "sparse.bin").read_bytes() == expected
    assert os.stat(work / "sparse.bin").st_blocks * 512 < 1 << 20


def test_the_stores_of_all_trajectories_share_one_budget(tmp_path):
    """The stores (on the host's disk) need a bound across trajectories, or together they fill
    the host's disk."""
    budget = StoreBudget(entries=5, size=1 << 20)
    snapshots = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        snapshots.append(
            WorkdirSnapshot(
                str(tmp_path / name),
                str(tmp_path / f"store-{name}"),
                protected=frozenset(),
                owner=None,
                max_entries=100,
                max_bytes=1 << 20,
                budget=budget,
            )
        )
        for i in range(3):
            (tmp_path / name / f"f{i}").write_text("x")
    a, b = snapshots
    a.checkpoint()
    with pytest.raises(LimitExceeded, match="store of committed files is full"):
        b.checkpoint()
    b.restore()
    assert os.listdir(tmp_path / "b") == []
    a.close()
    (tmp_path / "b" / "g").write_text("y")
    b.checkpoint()
    assert sorted(b.manifest) == ["g"]


def test_a_commits_claim_on_the_store_budget_covers_what_its_store_takes_on_disk(tmp_path):
    """A claim of the files' lengths alone is a few KB for a store of tens of MB (thousands of
    one-byte files with long names). Each entry claims whole blocks and its name's room: at
    least what the store's file system really uses (st_blocks, summed over the store)."""
    work = tmp_path / "work"
    work.mkdir()
    for d in range(12):
        (work / f"d{d:02d}").mkdir()
        for i in range(150):  # one-byte files with long names: indexed directories of many blocks
            (work / f"d{d:02d}" / (f"{i:04d}" + "n" * 240)).write_bytes(b"x")
    for d in range(40):
        (work / f"empty-{d}").mkdir()
        (work / f"e{d}").write_bytes(b"")
    (work / "big.bin").write_bytes(os.urandom((3 << 20) + 1))
    nested = work
    for level in range(20):
        nested = nested / f"level-{level}"
        nested.mkdir()
        (nested / "f").write_bytes(b"y" * 5000)
    store = tmp_path / "store"
    budget = StoreBudget(entries=1 << 20, size=1 << 40, block=os.statvfs(tmp_path).f_frsize)
    snapshot = WorkdirSnapshot(str(work), str(store), protected=frozenset(), owner=None,
                               max_entries=10_000, max_bytes=64 << 20, budget=budget)  # fmt: skip
    used = sum(
        os.lstat(os.path.join(d, n)).st_blocks * 512
        for d, dirs, files in os.walk(store)
        for n in dirs + files
    )
    used += os.lstat(store).st_blocks * 512
    claimed = budget._claimed[1]
    assert claimed >= used, f"claimed {claimed:,} B, the store takes {used:,} B"
    assert claimed < 3 * used  # and not wildly more
    snapshot.close()
    assert budget._claimed == (0, 0)


def test_space_allocated_past_a_files_end_counts_against_the_byte_limit(tmp_path):
    """Without counting it, ``fallocate(FALLOC_FL_KEEP_SIZE)`` keeps 200 MiB under a 64 MiB
    limit."""
    work = tmp_path / "work"
    work.mkdir()
    snapshot = WorkdirSnapshot(str(work), str(tmp_path / "s"), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    libc = ctypes.CDLL(None, use_errno=True)
    with open(work / "small.bin", "wb") as handle:
        handle.write(b"x")
        if (
            libc.fallocate(handle.fileno(), 1, ctypes.c_long(0), ctypes.c_long(4 << 20)) != 0
        ):  # KEEP_SIZE
            pytest.skip(f"no fallocate here: {os.strerror(ctypes.get_errno())}")
    assert os.stat(work / "small.bin").st_size == 1
    with pytest.raises(LimitExceeded, match="MiB in the working directory"):
        snapshot.checkpoint()


@pytest.mark.parametrize("make_it,match", [
    (lambda w: os.symlink("/etc", w / "link"), "symlink"),
    (lambda w: os.mkfifo(w / "fifo"), "FIFO"),
    (lambda w: socket.socket(socket.AF_UNIX).bind(str(w / "sock")), "socket"),
    # hard links: a copy per name
    (lambda w: ((w / "a").write_text("x"), os.link(w / "a", w / "b")), "2 names"),
])  # fmt: skip
def test_only_files_and_directories_are_kept(tmp_path, make_it, match):
    work = tmp_path / "work"
    work.mkdir()
    snapshot = WorkdirSnapshot(str(work), str(tmp_path / "s"), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    make_it(work)
    with pytest.raises(Unkeepable, match=match):
        snapshot.checkpoint()
    snapshot.restore()
    assert os.listdir(work) == []


def test_a_symlinked_parent_is_never_followed(tmp_path):
    """A directory swapped for a symlink to a host directory between checkpoint and restore: the
    restore removes the link and recreates the directory; the host directory is untouched."""
    work, host = tmp_path / "work", tmp_path / "host"
    work.mkdir()
    host.mkdir()
    (host / "secret").write_text("host")
    (work / "d").mkdir()
    (work / "d" / "f").write_text("mine")
    snapshot = WorkdirSnapshot(str(work), str(tmp_path / "s"), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    os.rename(work / "d", work / "moved")
    os.symlink(str(host), work / "d")
    snapshot.restore()
    assert (
        (work / "d").is_dir()
        and not (work / "d").is_symlink()
        and (work / "d" / "f").read_text() == "mine"
    )
    assert os.listdir(host) == ["secret"] and (host / "secret").read_text() == "host"
    assert sorted(os.listdir(work)) == ["d"]


def test_workdir_limits(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    snapshot = WorkdirSnapshot(str(work), str(tmp_path / "s"), protected=frozenset(), owner=None,
                               max_entries=5, max_bytes=1000)  # fmt: skip
    for i in range(6):
        (work / f"f{i}").write_text("x")
    with pytest.raises(LimitExceeded, match="more than 5 entries"):
        snapshot.checkpoint()
    snapshot.restore()
    assert os.listdir(work) == []
    snapshot.max_entries = 100
    deep = work
    for _ in range(40):
        deep = deep / "d"
    deep.mkdir(parents=True)
    with pytest.raises(LimitExceeded, match="deeper than"):
        snapshot.checkpoint()
    snapshot.restore()
    assert os.listdir(work) == []


def test_removing_a_tree_deeper_than_the_path_limit(tmp_path):
    """Thousands of levels (far past PATH_MAX and any descriptor budget) are removed."""
    root = tmp_path / "root"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("level-directory", dir_fd=fd)
        child = os.open("level-directory", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    remove_tree(str(root))
    assert not root.exists()


def test_removing_a_wide_tree_lists_each_directory_once(tmp_path, monkeypatch):
    """A removal that lists a directory again from the start after each subdirectory it
    removes takes many times the time on a wide tree. One listing per directory
    (empty subdirectories need none), the levels' descriptors bounded, whatever the shape."""
    from codedance.sandbox import files

    root = tmp_path / "root"
    for index in range(300):
        (root / f"full-{index}" / "inner").mkdir(parents=True)
        (root / f"full-{index}" / "inner" / "file").write_text("x")
        (root / f"empty-{index}").mkdir()
    deep = tmp_path / "deep"
    for _ in range(3 * files._MAX_OPEN_LEVELS):  # lifted to the top, found by listing the top again
        deep = deep / "d"
    deep.mkdir(parents=True)
    listings, open_now, most_open = [], [0], [0]
    real_scandir, real_open, real_close = os.scandir, os.open, os.close
    monkeypatch.setattr(files.os, "scandir", lambda fd: listings.append(fd) or real_scandir(fd))

    def counting_open(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        open_now[0] += 1
        most_open[0] = max(most_open[0], open_now[0])
        return fd

    def counting_close(fd):
        open_now[0] -= 1
        real_close(fd)

    monkeypatch.setattr(files.os, "open", counting_open)
    monkeypatch.setattr(files.os, "close", counting_close)
    remove_tree(str(root))
    assert not root.exists()
    assert len(listings) == 1 + 300 * 2, len(listings)  # the root, each full-* and each inner
    remove_tree(str(tmp_path / "deep"))
    assert not (tmp_path / "deep").exists()
    assert most_open[0] <= files._MAX_OPEN_LEVELS + 2


def test_a_step_is_forked_with_libc_only_while_the_kernel_counts_one_thread():
    """The spare is forked right after the step's reply, and a thread the
    snippet joined may not have ended in the kernel yet; libc's fork beside a live thread can
    hang the child, so `runtime._one_thread` reads the kernel's count (in a process of its own:
    this one runs the tests' service threads)."""
    code = (
        "import threading\nfrom codedance.sandbox.jail import runtime\nassert "
        "runtime._one_thread()\n"
        "stop = threading.Event()\nthread = threading.Thread(target=stop.wait)\nthread.start()\n"
        "assert not runtime._one_thread(wait_s=0.01)\nstop.set()\nthread.join()\n"
        "assert runtime._one_thread(wait_s=1.0)\nprint('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert done.stdout == "ok\n", done.stderr


def test_bounded_text_keeps_head_and_tail():
    stream = BoundedText(head=10, tail=5)
    for piece in ("0123456789", "abcdefghij", "KLMNO"):
        stream.write(piece)
    value = stream.value()
    assert value.startswith("0123456789") and value.endswith("KLMNO") and "10 characters" in value
    short = BoundedText(head=10, tail=5)
    short.write("hello")
    assert short.value() == "hello"


def test_arrays_become_images_in_the_right_colour_order():
    bgr = np.zeros((4, 4, 3), np.uint8)
    bgr[:, :, 0] = 255  # blue in OpenCV's order
    assert array_to_image(bgr, bgr=True).getpixel((0, 0)) == (0, 0, 255)
    assert array_to_image(bgr, bgr=False).getpixel((0, 0)) == (255, 0, 0)
    assert array_to_image(np.ones((4, 4)), bgr=False).getpixel((0, 0)) == 255
    with pytest.raises(ValueError):
        array_to_image(np.zeros((4, 4, 7)), bgr=False)


def test_collector_deduplicates_and_limits():
    from PIL import Image

    collector = ImageCollector(max_images=2, max_pixels=10_000)
    red = Image.new("RGB", (10, 10), (255, 0, 0))
    collector.add_pil(red, "a")
    collector.add_pil(red.copy(), "b")
    collector.add_pil(Image.new("RGB", (200, 200)), "c")
    collector.add_pil(Image.new("RGB", (5, 5), (0, 255, 0)), "d")
    assert [source for *_, source in collector.images] == ["a", "c"]
    assert collector.images[1][1] * collector.images[1][2] <= 10_000
    assert any("1 more image" in note for note in collector.finish_notes())


def test_snippets_run_like_notebook_cells():
    namespace: dict = {}
    assert run_snippet("a = 2\na * 21", namespace) == 42
    assert run_snippet("b = a", namespace) is None and namespace["b"] == 2
    assert executes_nothing('"""doc"""\n# c\npass') and not executes_nothing("import os")
    try:
        run_snippet("def g():\n    raise KeyError('k')\ng()", namespace)
    except KeyError as exc:
        failure = describe_failure(exc, "def g():\n    raise KeyError('k')\ng()")
    assert failure.type == "KeyError" and [n for n, _ in failure.frames] == [3, 2]


def test_the_deadline_holds_while_dropped_senders_keep_the_socket_busy():
    """A flood from a sender without budget keeps poll() returning readable; receive() must still
    end at its deadline (it checks the clock itself, not only when the socket is quiet)."""
    left, right = socket.socketpair()
    flooder: list[int] = []
    reader = protocol.Reader(right, max_bytes=1 << 20, with_credentials=True,
                             budget=lambda pid: 0 if pid in flooder else 1 << 20)  # fmt: skip
    child = os.fork()
    if child == 0:  # the flooder: its bytes are dropped unread
        try:
            while True:
                left.send(b"\x00" * 65536)
        finally:
            os._exit(0)
    flooder.append(child)
    try:
        started = time.monotonic()
        with pytest.raises(protocol.ReceiveTimeout):
            reader.receive(deadline=started + 0.3)
        assert time.monotonic() - started < 2.0 and reader.dropped_bytes > 0
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


def test_a_parsed_header_waiting_for_its_blobs_is_not_parsed_again(monkeypatch):
    left, right = socket.socketpair()
    reader = protocol.Reader(right, max_bytes=1 << 20, with_credentials=True)
    raw = protocol.encode({"op": "result", "pad": [0] * 1000}, [b"x" * 1000])
    left.sendall(raw[:-500])
    calls = []
    real = protocol.decode_header
    monkeypatch.setattr(protocol, "decode_header", lambda data: calls.append(1) or real(data))
    for _ in range(3):
        with pytest.raises(protocol.ReceiveTimeout):
            reader.receive(deadline=time.monotonic() + 0.05)
    left.sendall(raw[-500:])
    assert reader.receive(deadline=time.monotonic() + 5).blobs == (b"x" * 1000,) and len(calls) == 1


def test_executes_nothing_never_raises_on_pathological_code():
    assert executes_nothing("x = 1" + " + 1" * 100_000) is False
    assert executes_nothing("(" * 10_000 + ")" * 10_000) is False


def test_a_listed_pid_is_killed_only_while_it_is_in_that_group():
    """What `codedance sandbox gc` and the trajectories' kills rely on: a pid read from a group's
    list is signalled only if the process is still in that group (a sweep that
    kills by pid number may hit another process: a pid can be reused by then)."""
    from codedance.sandbox import cgroups

    child = subprocess.Popen(["sleep", "60"])
    try:
        lines = Path(f"/proc/{child.pid}/cgroup").read_text().splitlines()
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        found = [
            line.split(":", 2)[2]
            for line in lines
            if (line.split(":")[1] == "" if v2 else "pids" in line.split(":")[1].split(","))
        ]
        if not found:
            pytest.skip("no pids cgroup here")
        own = os.path.join("/sys/fs/cgroup", "" if v2 else "pids", found[0].lstrip("/"))
        other = os.path.join(own, "not-this-one")
        cgroups._kill_if_member(child.pid, cgroups._Membership(other))
        with pytest.raises(subprocess.TimeoutExpired):  # not a member there: left alone
            child.wait(timeout=0.5)
        cgroups._kill_if_member(child.pid, cgroups._Membership(own))
        assert child.wait(timeout=10) == -9
    finally:
        child.kill()
        child.wait()


def test_the_sweep_ignores_lock_names_that_are_not_a_services(tmp_path, monkeypatch):
    """A lock file named with wildcards must not make the sweep match live services' folders."""
    from codedance.sandbox import leftovers

    monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
    live = tmp_path / "codedance-1-0123abcd-work-x"
    live.mkdir()
    (live / "f").write_text("live")
    (tmp_path / "codedance-*.lock").write_text("")
    held = leftovers._try_lock(str(tmp_path / "codedance-1-0123abcd.lock"))
    try:
        assert leftovers.sweep() == []
        assert (live / "f").read_text() == "live"
    finally:
        os.close(held)
    assert leftovers.sweep() == ["codedance-1-0123abcd"] and not live.exists()


@contextlib.contextmanager
def _scratch_groups(names: list[str]):
    """As root, a scratch group of this test's own below this process's group in each hierarchy
    it uses (`service_parents`: NOT where a sweep looks by default), and below it, for each of
    ``names``, the group ``<name>/t<hex>``; yields {name: its directories ``<scratch>/<name>``}.
    Removes every group it made (leaves first), whatever is left, at the end."""
    from codedance.sandbox import cgroups

    if os.geteuid() != 0:
        pytest.skip("creating cgroups needs root")
    scratch = f"scratch-{secrets.token_hex(4)}"
    made: list[str] = []
    groups: dict[str, list[str]] = {name: [] for name in names}
    try:
        for parent in cgroups.service_parents():
            top = os.path.join(parent, scratch)
            try:
                os.mkdir(top)
            except OSError as exc:
                pytest.skip(f"cgroups are not writable here: {exc}")
            made.append(top)
            for name in names:
                service = os.path.join(top, name)
                os.mkdir(service)
                made.append(service)
                leaf = os.path.join(service, f"t{secrets.token_hex(6)}")
                os.mkdir(leaf)
                made.append(leaf)
                groups[name].append(service)
        yield groups
    finally:
        for directory in reversed(made):  # leaves first
            for _ in range(200):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _sleeper_in(service_dirs: list[str]) -> subprocess.Popen:
    """A sleeping process of ours, put in the trajectory group below each of ``service_dirs``."""
    sleeper = subprocess.Popen(["sleep", "300"])
    for service in service_dirs:
        (leaf,) = [entry.path for entry in os.scandir(service) if entry.is_dir()]
        Path(leaf, "cgroup.procs").write_text(str(sleeper.pid))
    return sleeper


def _recorded_lock(
    tmp_path: Path, name: str, directories: list[str], mode: int = 0o600, forged: bool = False
) -> Path:
    """A dead service's lock file ``name``, recording ``directories`` as its groups (``forged``:
    the lines as they are, not as `record_service_groups` writes them)."""
    from codedance.sandbox import leftovers

    lock = tmp_path / f"{name}.lock"
    fd = leftovers._try_lock(str(lock))
    try:
        if forged:
            os.write(fd, "".join(f"{line}\n" for line in directories).encode())
        else:
            leftovers.record_service_groups(fd, directories)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return lock


def test_the_sweep_finds_a_dead_services_groups_where_its_lock_records_them(tmp_path, monkeypatch):
    """A dead service's groups under another cgroup than the sweeping process's (its controller
    ran in a shell, a systemd unit, a delegated scope) are found through its lock's record: the
    process left in them is killed, and the groups and the lock are removed (a sweep that looks
    only under its own groups finds nothing, calls that "none left" and removes the lock,
    leaking the groups and their processes for good)."""
    from codedance.sandbox import cgroups, leftovers

    monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
    name = f"codedance-{os.getpid()}-{secrets.token_hex(4)}"
    with _scratch_groups([name]) as groups:
        sleeper = _sleeper_in(groups[name])
        try:
            lock = _recorded_lock(tmp_path, name, groups[name])
            assert not any(os.path.exists(os.path.join(p, name)) for p in cgroups.service_parents())
            assert leftovers.sweep() == [name]
            assert sleeper.wait(timeout=10) == -9
            assert not any(os.path.exists(d) for d in groups[name]) and not lock.exists()
        finally:
            sleeper.kill()
            sleeper.wait()


def test_the_sweep_keeps_the_lock_while_a_recorded_group_is_left(tmp_path, monkeypatch):
    """With a record, "none left" means every recorded group is gone: one the sweep cannot
    remove keeps the lock, for a later sweep."""
    from codedance.sandbox import leftovers

    monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
    name = f"codedance-{os.getpid()}-{secrets.token_hex(4)}"
    with _scratch_groups([name]) as groups:
        lock = _recorded_lock(tmp_path, name, groups[name])
        monkeypatch.setattr(
            leftovers.cgroups, "_rmdir_when_empty", lambda directory: None
        )  # "busy"
        assert leftovers.sweep() == [] and lock.exists()
        monkeypatch.undo()
        monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
        assert leftovers.sweep() == [name] and not lock.exists()
        assert not any(os.path.exists(d) for d in groups[name])


def test_a_forged_record_of_groups_is_ignored(tmp_path, monkeypatch):
    """The sweep trusts a lock's record only from a file of its own euid that nobody else may
    write, and only lines naming a group of the service's own name under /sys/fs/cgroup, without
    symlinks or ``..``: a record naming another group, a directory elsewhere, or one in a lock
    writable by others, kills and removes nothing."""
    from codedance.sandbox import leftovers

    monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
    name, other, loose = (f"codedance-{os.getpid()}-{secrets.token_hex(4)}" for _ in range(3))
    elsewhere = tmp_path / "elsewhere" / name
    (elsewhere / "t0").mkdir(parents=True)
    (elsewhere / "t0" / "cgroup.procs").write_text("1\n")
    with _scratch_groups([other, loose]) as groups:
        sleepers = [_sleeper_in(groups[other]), _sleeper_in(groups[loose])]
        try:
            forged = [
                os.path.join(os.path.dirname(d), "..", os.path.basename(os.path.dirname(d)), name)
                for d in groups[other]
            ]
            _recorded_lock(tmp_path, name, groups[other] + [str(elsewhere)] + forged, forged=True)
            _recorded_lock(tmp_path, loose, groups[loose], mode=0o666)
            # neither record is usable, so each lock is swept as one without cgroups here
            assert sorted(leftovers.sweep()) == sorted([name, loose])
            assert all(sleeper.poll() is None for sleeper in sleepers)
            assert all(os.path.isdir(d) for d in groups[other] + groups[loose])
            assert (elsewhere / "t0" / "cgroup.procs").read_text() == "1\n"
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()


def test_which_recorded_groups_are_trusted(tmp_path, monkeypatch):
    """`recorded_groups` line by line, and file by file (no root needed: the cgroup root is a
    folder of the test's)."""
    from codedance.sandbox import leftovers

    root = tmp_path / "cg"
    (root / "pids" / "a").mkdir(parents=True)
    (root / "link").symlink_to(root / "pids")
    monkeypatch.setattr(leftovers, "CGROUP_ROOT", str(root))
    name = "codedance-7-0123abcd"
    good = f"{root}/pids/a/{name}"
    lines = [
        f"/elsewhere/{name}",
        f"{root}/pids/a/codedance-7-99999999",
        f"{root}/pids/../pids/a/{name}",
        f"{root}/link/a/{name}",
        f"{root}//pids/a/{name}",
        f"pids/a/{name}",
        f"{root}/pids/a/{name}/",
        f"{root}/{name}x",
        good,
        good,
        "",
    ]
    path = tmp_path / "lock"
    path.write_text("\n".join(lines))
    path.chmod(0o600)
    fd = os.open(path, os.O_RDWR)
    try:
        assert leftovers.recorded_groups(fd, name) == [good]
        for mode in (0o620, 0o602, 0o666):
            os.fchmod(fd, mode)
            assert leftovers.recorded_groups(fd, name) is None
        os.fchmod(fd, 0o600)
        os.link(path, tmp_path / "second-link")
        assert leftovers.recorded_groups(fd, name) is None
        os.unlink(tmp_path / "second-link")
        if os.geteuid() == 0:
            os.fchown(fd, 65534, -1)
            assert leftovers.recorded_groups(fd, name) is None
            os.fchown(fd, 0, -1)
        os.pwrite(fd, b"\n" + b"x" * (1 << 17), os.fstat(fd).st_size)
        assert leftovers.recorded_groups(fd, name) is None  # too big to be a record
        leftovers.record_service_groups(fd, [f"{root}/link/a"])
        assert leftovers.recorded_groups(fd, name) is None  # no line ends in the name
        leftovers.record_service_groups(
            fd, [f"{root}/link/a/{name}", good]
        )  # resolved when recorded
        assert leftovers.recorded_groups(fd, name) == [good]
    finally:
        os.close(fd)


def test_lone_surrogates_and_chunk_floods_are_refused():
    message = protocol.Message(
        body={"op": "result", "status": "ok", "stdout": "\ud800"}, sender_pid=3
    )
    with pytest.raises(protocol.BadMessage, match="surrogate"):
        protocol.parse_result(message, Limits())
    flood = _png(4, 4)[:-12] + _chunk(b"tEXt", b"") * 5000 + _chunk(b"IEND", b"")
    with pytest.raises(ValueError, match="more than 4096 chunks"):
        protocol.check_png_structure(flood)


def test_a_directory_in_place_of_a_lock_does_not_stop_services(tmp_path, monkeypatch):
    from codedance.sandbox import forks, leftovers

    monkeypatch.setattr(leftovers, "_locks_dir", lambda: str(tmp_path))
    (tmp_path / "codedance-1-00000000.lock").mkdir()
    assert leftovers.sweep() == []
    name, fd = leftovers.claim_service_name()
    forks.close(fd)  # held for forked children: closed through `forks`
    assert name.startswith("codedance-")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the file-system identity needs root")
def test_acting_as_limits_this_thread_to_the_owners_rights(tmp_path):
    """A restore writes with the trajectory's rights: a root-only file is out of reach inside
    `acting_as`, for the calling thread only, and root's rights come back after it."""
    import threading

    from codedance.sandbox.files import acting_as

    secret = tmp_path / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    seen_by_other_thread = []
    go = threading.Event()
    other = threading.Thread(
        target=lambda: go.wait() and seen_by_other_thread.append(secret.read_text())
    )
    other.start()  # before the switch: a thread started inside would inherit this one's identity
    with acting_as((54321, 54321)):
        with pytest.raises(PermissionError):
            secret.read_text()
        go.set()
        other.join()
        made = tmp_path / "made"
        with pytest.raises(PermissionError):  # tmp_path is root's, 0700 or 0755: not writable
            made.write_text("x")
    assert seen_by_other_thread == ["root only"]
    assert secret.read_text() == "root only"


@pytest.mark.skipif(os.geteuid() != 0, reason="switching the file-system identity needs root")
def test_a_collection_while_acting_as_a_trajectory_runs_its_finalizers_as_root(tmp_path):
    """The cyclic garbage collector runs finalizers in whichever thread allocates: a `Sandbox`
    dropped unclosed would close itself inside a neighbour's restore as that trajectory, and its
    cgroups and files could not be removed and would be left for good. A
    collection there runs as root, then the thread acts as the trajectory again; nesting puts
    back the identity from before."""
    import gc

    from codedance.sandbox.files import acting_as

    secret = tmp_path / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    read_by_finalizer = []

    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            read_by_finalizer.append(secret.read_text())

    with acting_as((54321, 54321)):
        Cycle()
        gc.collect()
        with pytest.raises(PermissionError):  # the trajectory's identity again after the collection
            secret.read_text()
        with acting_as((54322, 54322)), pytest.raises(PermissionError):
            secret.read_text()
        with pytest.raises(PermissionError):  # nested: the outer identity is back, not root's
            secret.read_text()
    assert read_by_finalizer == ["root only"]
    assert secret.read_text() == "root only"


def test_directories_that_lock_their_owner_out_are_restored(tmp_path):
    """A committed directory of mode 000 (and one of 500) comes back with its contents and mode;
    a failed step's locked directory is removed."""
    work, store = tmp_path / "work", tmp_path / "store"
    (work / "locked" / "inner").mkdir(parents=True)
    (work / "locked" / "inner" / "f.txt").write_text("kept")
    (work / "readonly").mkdir()
    (work / "readonly" / "g.txt").write_text("kept too")
    (work / "readonly").chmod(0o500)
    (work / "locked").chmod(0o000)
    snapshot = WorkdirSnapshot(
        str(work), str(store), protected=frozenset(), owner=None, max_entries=100, max_bytes=1 << 20
    )
    (work / "locked").chmod(0o700)
    (work / "locked" / "inner" / "f.txt").write_text("changed")
    (work / "locked").chmod(0o000)
    (work / "readonly").chmod(0o700)
    (work / "readonly" / "g.txt").unlink()
    (work / "readonly").chmod(0o500)
    (work / "junk" / "deep").mkdir(parents=True)
    (work / "junk" / "deep" / "x").write_text("x")
    (work / "junk" / "deep").chmod(0o000)
    (work / "junk").chmod(0o000)
    snapshot.restore()
    assert sorted(os.listdir(work)) == ["locked", "readonly"]
    assert oct(os.stat(work / "locked").st_mode & 0o777) == oct(0o000)
    assert oct(os.stat(work / "readonly").st_mode & 0o777) == oct(0o500)
    (work / "locked").chmod(0o700)
    (work / "readonly").chmod(0o700)
    assert (work / "locked" / "inner" / "f.txt").read_text() == "kept"
    assert (work / "readonly" / "g.txt").read_text() == "kept too"


@pytest.mark.parametrize("unread", ["answer", "request"])
def test_a_copying_helper_ends_quietly_when_the_controller_dies_mid_request(unread):
    """A controller that dies with the helper's answer unread (or its own request unanswered)
    leaves the helper's next receive or answer failing with ECONNRESET or EPIPE; both end
    `charged_copy.serve` as end of file does, with no traceback."""
    from codedance.sandbox.memory import charged_copy

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    home = os.open(os.devnull, os.O_WRONLY)  # "leaving the group" writes here
    try:
        helper = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                charged_copy.__file__,
                str(theirs.fileno()),
                str(home),
                "0",
            ],
            pass_fds=(theirs.fileno(), home),
            stderr=subprocess.PIPE,
        )
    finally:
        theirs.close()
        os.close(home)
    try:
        assert ours.recv(16) == charged_copy._STARTED
        group = os.open(os.devnull, os.O_WRONLY)  # "joining a group" writes the helper's pid here
        try:
            socket.send_fds(ours, [charged_copy._JOIN], [group])
            assert select.select([ours], [], [], 10)[0], "the helper did not answer"
            # "answer": the answer is left unread, so the helper's next receive is reset
            # (ECONNRESET); "request": the answer is read, another request sent and the
            # controller gone at once, so the helper reads it and its answer meets EPIPE
            if unread == "request":
                ours.recv(16)
                socket.send_fds(ours, [charged_copy._JOIN], [group])
        finally:
            os.close(group)
        ours.close()
        assert helper.wait(timeout=10) == 0
        assert helper.stderr.read() == b""
    finally:
        helper.kill()
        helper.wait()
        helper.stderr.close()


def test_a_forked_child_lets_go_of_the_descriptors_held_from_forks():
    """`forks`: in a child of os.fork() each held descriptor is /dev/null (so the child no longer
    holds the pipe's write end: its reader sees end of file once the parent closes its own);
    other descriptors are untouched; `forks.close` stops holding it."""
    import select

    from codedance.sandbox import forks

    read_end, write_end = os.pipe()
    other_read, other_write = os.pipe()
    forks.hold(write_end)
    try:
        pid = os.fork()
        if pid == 0:
            ok = os.path.samestat(
                os.fstat(write_end), os.stat(os.devnull)
            ) and not os.get_inheritable(write_end)
            ok = os.write(other_write, b"k") == 1 and ok  # untouched
            ok = (
                bool(select.select([read_end], [], [], 10)[0])
                and os.read(read_end, 1) == b""
                and ok
            )
            os._exit(0 if ok else 1)
        os.close(other_write)
        assert os.read(other_read, 1) == b"k"
        forks.close(write_end)  # the last write end: the child's read ends
        assert write_end not in forks.held()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        for fd in (read_end, other_read):
            os.close(fd)


class _FakeSysctl:
    """/proc/sys as a dict: ``read``/``write`` for `isolation.file_table`; ``refuse``: writes
    fail."""

    def __init__(self, values, refuse=None):
        self.values, self.refuse, self.writes = dict(values), refuse, []

    def read(self, path):
        return self.values.get(path)

    def write(self, path, value):
        if self.refuse is not None:
            raise self.refuse
        self.writes.append((path, value))
        self.values[path] = value


def test_a_low_fs_file_max_is_raised_as_root_and_noted_else_reported_with_what_to_run():
    """fs.file-max is host-wide, and one trajectory can hold millions of file objects (files
    mapped, then closed), most of a host's default. Where raising is allowed (root, and
    asked: tests/sandbox/test_file_max.py) it is raised and said so in the notes, else the value
    and what to run are reported; it is never lowered, and one high enough is left alone."""
    from codedance.sandbox.isolation import (
        FILE_MAX,
        FILE_MAX_RAISED,
        MAX_MAP_COUNT,
        file_table,
        file_table_needed,
    )

    low = _FakeSysctl({FILE_MAX: 2_466_116, MAX_MAP_COUNT: 65530})
    needed = file_table_needed(65536, 32, read=low.read)
    assert needed == 65536 * 32 * 65530
    note, missing = file_table(needed, may_raise=True, read=low.read, write=low.write)
    assert low.writes == [(FILE_MAX, FILE_MAX_RAISED)] and missing is None
    assert "raised the host's fs.file-max from 2,466,116" in note

    for high in (needed, FILE_MAX_RAISED):  # high enough: untouched, nothing to say
        fine = _FakeSysctl({FILE_MAX: high})
        assert file_table(needed, may_raise=True, read=fine.read, write=fine.write) == (None, None)
        assert fine.writes == []

    for sysctl, may_raise in (
        (_FakeSysctl({FILE_MAX: 1000}), False),
        (_FakeSysctl({FILE_MAX: 1000}, refuse=PermissionError(13, "read-only")), True),
    ):
        note, missing = file_table(
            needed, may_raise=may_raise, read=sysctl.read, write=sysctl.write
        )
        assert note is None and sysctl.writes == [] and sysctl.values[FILE_MAX] == 1000
        assert f"sysctl -w fs.file-max={FILE_MAX_RAISED}" in missing and "ENFILE" in missing

    class _Capped(_FakeSysctl):  # the kernel takes the write but keeps a lower value
        def write(self, path, value):
            self.writes.append((path, value))
            self.values[path] = 5000

    capped = _Capped({FILE_MAX: 1000})
    note, missing = file_table(needed, may_raise=True, read=capped.read, write=capped.write)
    assert note is None and "still 5000" in missing
    assert file_table(needed, may_raise=True, read=_FakeSysctl({}).read) == (
        None,
        None,
    )  # no /proc: not Linux


def test_the_service_reports_the_file_table_in_its_isolation(monkeypatch):
    """The service's start asks `file_table` (with trajectories x pids.max x vm.max_map_count)
    and puts what it says in ``isolation.notes`` or ``isolation.missing``."""
    from codedance.sandbox import service as service_module
    from codedance.sandbox.isolation import Isolation

    asked = []

    def fake(needed, *, may_raise):
        asked.append(needed)
        return "raised the host's fs.file-max (fake)", None

    monkeypatch.setattr(service_module, "file_table", fake)
    svc = service_module.SandboxService(use_namespaces=False, use_cgroups=False, use_seccomp=False)
    try:
        assert asked and asked[0] >= 65536 * 32
        assert svc.isolation.notes == ("raised the host's fs.file-max (fake)",)
        assert "note: raised the host's fs.file-max (fake)" in svc.isolation.describe()
    finally:
        svc.close()
    monkeypatch.setattr(
        service_module, "file_table", lambda needed, *, may_raise: (None, "run sysctl (fake)")
    )
    svc = service_module.SandboxService(use_namespaces=False, use_cgroups=False, use_seccomp=False)
    try:
        assert (
            dict(svc.isolation.missing)["file table"] == "run sysctl (fake)"
            and svc.isolation.notes == ()
        )
    finally:
        svc.close()
    assert Isolation(True, True, True, True, True).notes == ()


def test_the_zygote_imports_none_of_the_controller_and_the_public_names_still_resolve():
    """Every module the zygote holds is memory whose page tables each step's fork copies, and
    each at-fork hook a module registers runs in every forked step: the package's public names
    load on first use, so ``python -m codedance.sandbox.jail.runtime`` imports no controller
    module."""
    probe = (
        "import sys, codedance.sandbox.jail.runtime\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'concurrent')"
        " or m in ('codedance.sandbox.sandbox', 'codedance.sandbox.service', "
        "'codedance.sandbox.pool',"
        " 'codedance.sandbox.cgroups', 'codedance.sandbox.forks') or "
        "m.startswith('codedance.sandbox.memory')))\n"
        "import codedance.sandbox as package\n"
        "print(package.Sandbox.__module__, package.SandboxPool.__module__, "
        "package.Limits.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        "[]",
        "codedance.sandbox.sandbox codedance.sandbox.pool codedance.sandbox.layout",
    ]
    import codedance.sandbox as package

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        package.Nope  # noqa: B018
    assert set(package.__all__) == set(package._PUBLIC) and set(package.__all__) <= set(
        dir(package)
    )


def test_a_closing_sandboxs_checkpoint_and_restore_stop_walking(tmp_path):
    """A restore walking half a million directories a failed step left would run for the run's
    whole recovery time after close(); the walk stops once ``stop()`` says so."""
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    (work / "kept.txt").write_text("kept")
    snapshot = WorkdirSnapshot(
        str(work),
        str(store),
        protected=frozenset(),
        owner=None,
        max_entries=10_000,
        max_bytes=1 << 20,
    )
    for n in range(600):
        (work / f"d{n}").mkdir()
    closing = []
    snapshot.stop = lambda: bool(closing)
    closing.append(True)
    with pytest.raises(InterruptedError):
        snapshot.checkpoint()
    with pytest.raises(InterruptedError):
        snapshot.restore()
    closing.clear()
    snapshot.restore()
    assert sorted(p.name for p in work.iterdir()) == ["kept.txt"]


def test_the_remover_takes_a_huge_tree_off_close_and_stops_with_its_service(tmp_path):
    """close() must not wait while a hostile step's 500,000 directories are removed (tens of
    seconds); what does not go within the inline time is removed in the background."""
    from codedance.sandbox.remover import Remover

    def tree(name: str) -> Path:
        root = tmp_path / name
        for n in range(200):  # 600 entries: past the first deadline check (every 256)
            (root / f"d{n}" / "inner").mkdir(parents=True)
            (root / f"d{n}" / "inner" / "f").write_text("x")
        (root / "d0").chmod(0o000)  # as a hostile step leaves them
        return root

    remover = Remover(inline_s=0.0)
    first = tree("first")
    remover.discard(str(first))  # the deadline passes at the first check: the rest goes behind
    assert remover._thread is not None, "nothing was handed to the background"
    for _ in range(500):
        if not first.exists():
            break
        time.sleep(0.01)
    assert not first.exists()
    remover.stop()
    second = tree("second")
    remover.discard(str(second))  # once stopped: removed at once, here
    assert not second.exists()


def _host(**changes):
    from codedance.sandbox.promises import COLUMNS

    return replace(dict(COLUMNS)["ordinary user, user namespaces"], **changes)


def test_docs_show_the_promises_table():
    """docs/sandbox.md's table is `promises.docs_table`: the docs and `sandbox check` agree."""
    from codedance.sandbox.promises import docs_table

    assert docs_table() in (Path(__file__).resolve().parents[2] / "docs" / "sandbox.md").read_text()


def test_a_private_working_directory_is_promised_only_with_a_uid_or_a_view_of_its_own():
    from codedance.sandbox.promises import HOLDS, NO, verdicts

    def private(host):
        return next(verdict for key, _, _, verdict in verdicts(host) if key == "private")

    assert private(_host()).state == HOLDS
    assert private(_host(private_views=False)).state == NO
    assert private(_host(private_views=False, root=True)).state == HOLDS
    assert private(_host(private_views=False, namespaces=False)).state == NO


def test_a_view_of_its_own_bounds_a_trajectorys_space_where_nothing_else_does():
    """A private view's own tmpfs keeps neighbours' commits apart and bounds the files; where no
    mount is possible the shared disk is said plainly; memfds are refused without cgroups."""
    from codedance.sandbox.promises import BOUNDED, HOLDS, verdicts

    def verdict(host, wanted):
        return next(verdict for key, _, _, verdict in verdicts(host) if key == wanted)

    container = _host(private_views=False, namespaces=False, root=True)
    assert verdict(_host(), "independent").state == HOLDS
    assert verdict(container, "independent").state == BOUNDED
    assert "unnamed files" in verdict(container, "independent").why
    own = verdict(_host(), "files_memory")
    assert own.state == BOUNDED and "tmpfs of the trajectory's own" in own.why
    assert "memfds refused" in verdict(_host(), "memory").why
    assert "/dev/shm" in verdict(container, "memory").why
    assert "memfds unbounded" in verdict(_host(seccomp=False), "memory").why


def test_memfds_are_refused_only_where_captured_outputs_can_be_unnamed_files(tmp_path):
    """Without memfds a step's captured outputs are O_TMPFILE files in its working directory: a
    file system that cannot make them (here /proc; overlayfs before Linux 6.6) keeps memfds."""
    from codedance.sandbox.service import takes_unnamed_files

    assert takes_unnamed_files(str(tmp_path))
    assert not takes_unnamed_files("/proc")
    assert os.listdir(tmp_path) == []


def test_sandbox_check_fails_only_for_a_promise_the_host_makes():
    from codedance.cli.console import make_console
    from codedance.cli.sandbox_cmd import show_promises
    from codedance.sandbox.checks import CheckResult

    results = [
        CheckResult(1, "private working directory", "failed", "listed", 0.1),
        CheckResult(2, "state persists across steps", "passed", "", 0.1),
    ]
    console = make_console()
    assert show_promises(console, _host(private_views=False), results, as_json=False) == []
    assert show_promises(console, _host(), results, as_json=False) == ["private working directory"]
