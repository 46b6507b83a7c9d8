"""The pipeline streams its sources: items are read as the window frees, not all at once, and a
table is read row by row (parquet record batches, JSONL and TSV lines)."""

from __future__ import annotations

import base64
import gc
import io
import json
import weakref
from pathlib import Path

import pytest
from PIL import Image as PILImage

from codedance.curate import parse_config, run_curate
from codedance.curate.sources import SOURCES, iter_items, register_source
from codedance.eval.sources import iter_tsv, read_tsv
from codedance.policy.replay_server import ReplayServer
from codedance.types import AnswerKind, Image, Task

pytestmark = pytest.mark.tier("integration")

N = 60


def _picture(i: int) -> Image:
    return Image.from_pil(PILImage.new("RGB", (32, 32), (i, 255 - i, (7 * i) % 256)), "input:0")


def _noisy(i: int) -> bytes:
    """A noisy PNG (its base64 is longer than a file name, as every real image's is)."""
    buffer = io.BytesIO()
    noise = PILImage.effect_noise((32, 32), 60 + i).convert("RGB")
    PILImage.blend(PILImage.new("RGB", (32, 32), (i, 0, 0)), noise, 0.5).save(buffer, format="PNG")
    return buffer.getvalue()


def test_items_are_read_as_the_window_frees_not_all_at_once(tmp_path: Path) -> None:
    alive: list[weakref.ref[Image]] = []
    most = [0]

    def counted(spec: dict, base: Path):
        for i in range(N):
            gc.collect()
            most[0] = max(most[0], sum(r() is not None for r in alive))
            image = _picture(i)
            alive.append(weakref.ref(image))
            yield Task(
                id=f"dots-{i}",
                question=f"How many dots in picture {i}?",
                images=(image,),
                answer="3",
                kind=AnswerKind.COUNT,
            )

    register_source("counted", counted)
    try:
        with ReplayServer(
            lambda body: "<think>t</think><answer>3</answer>", ("weak", "strong")
        ) as server:
            endpoint = {"url": server.url, "max_in_flight": 2, "retries": 0}
            raw = {
                "out": str(tmp_path / "run"),
                "stages": ["filter"],
                "sandboxes": 1,
                "sources": [{"kind": "counted"}],
                "filter": {"k": 1, "judge": "never", "easy_keep": 1.0},
                "endpoints": {
                    "weak": {**endpoint, "model": "weak"},
                    "strong": {**endpoint, "model": "strong"},
                },
            }
            result = run_curate(parse_config(raw), stream=None)
    finally:
        del SOURCES["counted"]
    assert result.items == N and result.stage_counts["filter"]["done"] == N
    # at most the window (2 in flight + 1 sandbox slot), the report's 4 + 4 samples and the one
    # being read were alive at once: never the whole source
    assert 0 < most[0] <= 3 + 8 + 1 < N


def test_tables_stream_row_by_row_with_the_same_rows_as_before(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pngs = [_noisy(i) for i in range(40)]
    rows = [
        {"question": f"q{i}?", "answer": str(i), "image": {"bytes": png, "path": None}}
        for i, png in enumerate(pngs)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet", row_group_size=10)
    (tmp_path / "t.jsonl").write_text(
        "".join(
            json.dumps(
                {"question": f"q{i}?", "answer": str(i), "image": base64.b64encode(p).decode()}
            )
            + "\n"
            for i, p in enumerate(pngs)
        )
    )
    for name in ("t.parquet", "t.jsonl"):
        counts: dict[str, int] = {}
        items = iter_items([{"kind": "table", "path": name, "name": "t"}], tmp_path, counts)
        first = next(items)
        assert first.task.question == "q0?" and counts == {
            "t.read": 1
        }  # read one row, not the file
        assert [i.task.answer for i in items] == [str(i) for i in range(1, 40)] and counts == {
            "t.read": 40
        }
    # VLMEvalKit TSV: a short image field names another row, even a later one
    encoded = [base64.b64encode(p).decode() for p in pngs[:2]]
    tsv = tmp_path / "b.tsv"
    tsv.write_text(
        "index\tquestion\tanswer\timage\n0\tq0?\t0\t1\n1\tq1?\t1\t"
        + encoded[1]
        + "\n2\tq2?\t2\t"
        + encoded[0]
        + "\n"
    )
    streamed = list(iter_tsv(tsv))
    assert (
        streamed == read_tsv(tsv)
        and streamed[0].images == (pngs[1],)
        and streamed[2].images == (pngs[0],)
    )
    buffer = io.BytesIO(streamed[0].images[0])
    assert PILImage.open(buffer).size == (32, 32)
