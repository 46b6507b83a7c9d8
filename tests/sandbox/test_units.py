"""Unit tests of the sandbox's parts that need no jail: wire format, atomic files, capture."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest

from codedance.sandbox import protocol
from codedance.sandbox.capture import BoundedText, ImageCollector, array_to_image
from codedance.sandbox.execution import describe_failure, executes_nothing, run_snippet
from codedance.sandbox.files import LimitExceeded, WorkdirSnapshot


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
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.Reader(right, max_bytes=1000).receive()
    left, right = socket.socketpair()
    left.sendall(b"\x00\x00\x00\x03{x}")
    with pytest.raises(protocol.ProtocolError, match="malformed"):
        protocol.Reader(right, max_bytes=1000).receive()
    left.close()
    with pytest.raises(protocol.PeerClosed):
        protocol.Reader(right, max_bytes=1000).receive()


def test_receive_times_out():
    import time

    _, right = socket.socketpair()
    with pytest.raises(protocol.ReceiveTimeout):
        protocol.Reader(right, max_bytes=100).receive(deadline=time.monotonic() + 0.05)


def test_workdir_restore_undoes_every_kind_of_change(tmp_path):
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    (work / "keep.txt").write_text("one")
    (work / "d").mkdir()
    (work / "d" / "inner.txt").write_text("inner")
    os.symlink("keep.txt", work / "link")
    snapshot = WorkdirSnapshot(str(work), str(store), protected=frozenset(), owner=None,
                               max_entries=100, max_bytes=1 << 20)  # fmt: skip
    (work / "keep.txt").write_text("two")
    (work / "new.txt").write_text("new")
    (work / "d" / "inner.txt").unlink()
    os.unlink(work / "link")
    os.symlink("/etc/passwd", work / "link")
    os.mkfifo(work / "fifo")
    snapshot.restore()
    assert (work / "keep.txt").read_text() == "one"
    assert (work / "d" / "inner.txt").read_text() == "inner"
    assert not (work / "new.txt").exists()
    assert os.readlink(work / "link") == "keep.txt"
    (work / "keep.txt").write_text("three")
    snapshot.checkpoint()
    (work / "keep.txt").write_text("four")
    snapshot.restore()
    assert (work / "keep.txt").read_text() == "three"


def test_workdir_limits(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    snapshot = WorkdirSnapshot(str(work), str(tmp_path / "s"), protected=frozenset(), owner=None,
                               max_entries=5, max_bytes=1000)  # fmt: skip
    for i in range(6):
        (work / f"f{i}").write_text("x")
    with pytest.raises(LimitExceeded, match="more than 5 files"):
        snapshot.checkpoint()
    snapshot.restore()
    assert os.listdir(work) == []


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
