"""The curate stages' pieces: config errors, source formats and dedup, box rules, strict parsing,
the easy share, verification's no-op / duplicate / replay checks, the CLI's dry run."""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from codedance.cli import app
from codedance.curate import CurateError, parse_config
from codedance.curate.atomic import Box, BoxesUnparseable, box_problem, code_turns, parse_boxes
from codedance.curate.config import AtomicConfig
from codedance.curate.filtering import keeps_easy
from codedance.curate.inspectors import parse_word
from codedance.curate.sources import load_items
from codedance.curate.verification import replay, structural_problem
from codedance.policy.scripted import ScriptedPolicy
from codedance.rollout import Episode, EpisodeConfig, arun_episode
from codedance.sandbox import SandboxPool
from codedance.world import generate

pytestmark = pytest.mark.tier("integration")

ENDPOINTS = {r: {"url": "http://127.0.0.1:9/v1", "model": "m"} for r in ("weak", "strong", "judge")}


def _png(color: tuple[int, int, int]) -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", (40, 30), color).save(buffer, format="PNG")
    return buffer.getvalue()


def _jpeg(color: tuple[int, int, int]) -> bytes:
    """A noisy JPEG (its base64 is longer than a file name, as every real image's is)."""
    buffer = io.BytesIO()
    noise = PILImage.effect_noise((40, 30), 60).convert("RGB")
    PILImage.blend(PILImage.new("RGB", (40, 30), color), noise, 0.5).save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"filtr": {}}, "unknown setting(s) filtr"),
        ({"endpoints": {"weak": ENDPOINTS["weak"]}}, "need judge, strong"),
        ({"filter": {"k": 0}}, "filter.k: must be at least 1, got 0"),
        (
            {"filter": {"easy_keep": 1.5}},
            "filter.easy_keep: must be at least 0 and at most 1, got 1.5",
        ),
        (
            {"endpoints": {**ENDPOINTS, "weak": {**ENDPOINTS["weak"], "max_in_flight": 0}}},
            "endpoints.weak.max_in_flight: must be at least 1, got 0",
        ),
        ({"sandboxes": -1}, "sandboxes: must be at least 1, got -1"),
        ({"atomic": {"zoom": 3}}, "unknown setting(s) atomic.zoom"),
        ({"sources": [], "stages": ["filter"]}, "sources must be a non-empty list"),
        ({"stages": ["crop"]}, "unknown stage(s) crop"),
        (
            {"endpoints": {**ENDPOINTS, "weak": {**ENDPOINTS["weak"], "max_retries": 0}}},
            "endpoints.weak.max_retries is now endpoints.weak.retries",
        ),
        (
            {"endpoints": {**ENDPOINTS, "strong": {**ENDPOINTS["strong"], "vllm_extras": "no"}}},
            "endpoints.strong.vllm_extras: expected true or false",
        ),
        ({"atomic": {"max_turns": 4}}, "atomic.max_turns is now episode.max_turns"),
        ({"verify": {"exec_timeout_s": 5}}, "verify.exec_timeout_s is now episode.exec_timeout_s"),
        ({"episode": {"max_turns": 0}}, "episode.max_turns: must be at least 1"),
    ],
)
def test_bad_configs_fail_with_one_clear_line(changes: dict, message: str) -> None:
    """Each case changes one part of a config that is otherwise valid."""
    raw = {"out": "o", "endpoints": ENDPOINTS, "sources": [{"kind": "world"}], **changes}
    with pytest.raises(CurateError, match=None) as info:
        parse_config(raw)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_table_sources_read_every_image_encoding_and_dedupe(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    red, blue = _png((200, 0, 0)), _jpeg((0, 0, 200))
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "g.png").write_bytes(_png((0, 200, 0)))
    rows = [
        {"id": "a", "image": {"bytes": red, "path": None}, "question": "Color?", "answer": "red"},
        {
            "id": "b",
            "image": {"bytes": None, "path": "pics/g.png"},
            "question": "Color?",
            "answer": "green",
        },
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "hf.parquet")
    (tmp_path / "b64.jsonl").write_text(
        json.dumps(
            {
                "id": "c",
                "image": base64.b64encode(blue).decode(),
                "question": "Color?",
                "answer": "blue",
            }
        )
        + "\n"
    )
    with open(tmp_path / "vlm.tsv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["index", "image", "question", "answer"], delimiter="\t")
        writer.writeheader()
        writer.writerow(
            {
                "index": 0,
                "image": base64.b64encode(red).decode(),
                "question": "color?  ",
                "answer": "red",
            }
        )
    specs = [
        {"kind": "table", "name": "hf", "path": "hf.parquet"},
        {"kind": "table", "name": "b64", "path": "b64.jsonl"},
        {"kind": "table", "name": "vlm", "path": "vlm.tsv", "id": "index"},
    ]
    items, counts = load_items(specs, tmp_path)
    assert [(i.source, i.task.answer) for i in items] == [
        ("hf", "red"),
        ("hf", "green"),
        ("b64", "blue"),
    ]
    assert counts == {
        "hf.read": 2,
        "b64.read": 1,
        "vlm.read": 1,
        "vlm.duplicates": 1,
    }  # same image + question
    assert all(
        i.task.images[0].png[:4] == b"\x89PNG" and i.task.images[0].size == (40, 30) for i in items
    )
    with pytest.raises(CurateError, match="unknown kind 'hub'"):
        load_items([{"kind": "hub"}], tmp_path)
    with pytest.raises(CurateError, match="row 0: needs 'prompt'"):
        load_items([{"kind": "table", "path": "b64.jsonl", "question": "prompt"}], tmp_path)


def test_box_parsing_is_strict_and_rules_name_each_bad_case() -> None:
    boxes = parse_boxes(
        'Here:\n```json\n[{"label": "red tag", "bbox_2d": [10, 20, 80.4, 60]}]\n```'
    )
    assert boxes == [Box("red tag", 10, 20, 80, 60)]
    assert parse_boxes('{"label": "x", "bbox_2d": [1, 2, 3, 4]}') == [Box("x", 1, 2, 3, 4)]
    for reply in (
        "the tag is top left",
        "[]",
        '[{"label": "a", "bbox_2d": [1, 2, 3]}]',
        '[{"bbox_2d": [1, true, 3, 4]}]',
    ):
        with pytest.raises(BoxesUnparseable):
            parse_boxes(reply)
    config, size, q = AtomicConfig(), (400, 300), "What is written on the small red tag?"
    assert box_problem(Box("red tag", 10, 10, 100, 80), size, q, config) is None
    assert box_problem(Box("red tag", -1, 10, 100, 80), size, q, config) == "outside"
    assert box_problem(Box("red tag", 10, 10, 401, 80), size, q, config) == "outside"
    assert box_problem(Box("red tag", 10, 10, 15, 80), size, q, config) == "degenerate"
    assert box_problem(Box("red tag", 50, 10, 40, 80), size, q, config) == "degenerate"
    assert box_problem(Box("red tag", 0, 0, 400, 290), size, q, config) == "whole_image"
    assert box_problem(Box("tree", 10, 10, 100, 80), size, q, config) == "label_mismatch"


def test_inspector_verdicts_parse_strictly_and_easy_share_is_stable() -> None:
    assert parse_word("True", ("True", "False")) == "True"
    assert parse_word(" **bad**.", ("GOOD", "BAD")) == "BAD"
    assert parse_word("True, because", ("True", "False")) is None
    assert parse_word("", ("GOOD", "BAD")) is None
    keys = [f"{i:016x}"[::-1] for i in range(2000)]
    kept = sum(keeps_easy(k, 0.25) for k in keys)
    assert 400 < kept < 600
    assert [keeps_easy(k, 0.25) for k in keys] == [keeps_easy(k, 0.25) for k in keys]
    assert not any(keeps_easy(k, 0.0) for k in keys) and all(keeps_easy(k, 1.0) for k in keys)


def test_verification_rejects_noop_and_repeated_turns_and_lying_outputs() -> None:
    task = generate("search", "medium", 0)
    config = EpisodeConfig(max_turns=6)
    answer = f"<think>ok</think>\n<answer>{task.answer}</answer>"
    crop = code_turns([Box("purple tag", 100, 100, 300, 260)], "medium", 3)[0]

    def code(body: str) -> str:
        return f"<think>try</think>\n<code>\n```python\n{body}\n```\n</code>"

    async def main() -> dict[str, object]:
        async with SandboxPool(max_running=2) as pool:

            async def episode(script: list[str]):
                sandbox = await pool.asandbox(images=Episode(task, config).images)
                try:
                    return await arun_episode(ScriptedPolicy(script), task, sandbox, config)
                finally:
                    sandbox.close()

            good = await episode([crop, answer])
            boxes = [Box("purple tag", 100, 100, 300, 260), Box("tag", 400, 300, 520, 380)]
            annotated = await episode([*code_turns(boxes, "hard", 3, annotate=True), answer])
            shown = good.turns[0].result
            lied = replace(
                good,
                turns=(replace(good.turns[0], result=replace(shown, stdout="9\n")), good.turns[1]),
            )
            return {
                "annotated": annotated,
                "annotated_replay": await replay(task, annotated, pool, config, 15.0),
                "good": structural_problem(good),
                "good_replay": await replay(task, good, pool, config, 15.0),
                "lied": await replay(task, lied, pool, config, 15.0),
                "noop": structural_problem(await episode([code("x = 1"), answer])),
                "empty": structural_problem(await episode([code("# nothing"), answer])),
                "twice": structural_problem(
                    await episode([code("print(1)"), code("print(1)"), answer])
                ),
            }

    v = asyncio.run(main())
    assert v["good"] is None and v["good_replay"] is None
    annotated = v["annotated"]  # drawing turn, two crops, contrast, answer: all ran and replay
    assert [t.result.status.value for t in annotated.turns[:4]] == ["ok"] * 4
    width, height = Episode(task, config).images[0].size
    assert annotated.turns[0].result.stdout == f"marked 2 regions on ({width}, {height})\n"
    assert len(annotated.turns[0].result.images) == 1 and annotated.turns[0].result.images[
        0
    ].size == (width, height)
    assert structural_problem(annotated) is None and v["annotated_replay"] is None
    assert v["lied"].reason == "output_mismatch" and "stdout" in v["lied"].detail
    assert v["noop"].reason == "noop_code" and v["empty"].reason == "noop_code"
    assert v["twice"].reason == "duplicate_turn" and "turn 1 repeats turn 0" in v["twice"].detail


def test_cli_dry_run_prints_the_plan_and_request_budget(tmp_path: Path) -> None:
    config = {
        "out": "run",
        "endpoints": ENDPOINTS,
        "filter": {"k": 3},
        "sources": [{"kind": "world", "skills": ["search"], "n": 5}],
    }
    path = tmp_path / "curate.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    result = CliRunner().invoke(app, ["curate", "run", str(path), "--dry-run"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)
    assert planned["items"] == 5 and planned["stages"] == ["filter", "atomic", "verify"]
    # judge: verification's grading, and the filter's at most 2k distinct text answers per item
    assert planned["request_budget"] == {"weak": 15, "strong": 15 + 10, "judge": 5 + 2 * 3 * 5}
    assert not (tmp_path / "run").exists()
    bad = CliRunner().invoke(app, ["curate", "run", str(tmp_path / "missing.yaml")])
    assert bad.exit_code == 2 and "no config file" in bad.output


def test_inspect_stage_drops_by_verdict_and_counts_unparseable_replies(tmp_path: Path) -> None:
    from codedance.curate import run_curate
    from codedance.policy.replay_server import ReplayServer
    from codedance.types import Image
    from codedance.world import task_set

    tasks = task_set(4, 0, ["counting"], ["easy"])
    # per task (by its question): the image verdict, then the question verdict
    verdicts = {
        tasks[0].question: ("True", "GOOD"),
        tasks[1].question: ("False", "GOOD"),
        tasks[2].question: ("**True**", "BAD"),
        tasks[3].question: ("Probably yes", "GOOD"),
    }
    assert len(verdicts) == 4

    images = {Episode(t, EpisodeConfig()).images[0].sha256: verdicts[t.question][0] for t in tasks}

    def vlm(body: dict) -> str:
        parts = body["messages"][0]["content"]
        text = "".join(p.get("text", "") for p in parts)
        if "fine-grained visual question answering" in text:  # the image check: decide by the image
            url = next(p["image_url"]["url"] for p in parts if p.get("type") == "image_url")
            return images[Image.from_png(base64.b64decode(url.split(",", 1)[1])).sha256]
        return next(v[1] for q, v in verdicts.items() if q in text)

    with ReplayServer(vlm, ("vlm",)) as server:
        raw = {
            "out": str(tmp_path / "run"),
            "stages": ["inspect"],
            "endpoints": {"strong": {"url": server.url, "model": "vlm"}},
            "sources": [
                {"kind": "world", "skills": ["counting"], "difficulties": ["easy"], "n": 4}
            ],
        }
        result = run_curate(parse_config(raw), stream=None)
    assert result.stage_counts["inspect"] == {
        "done": 4,
        "kept": 1,
        "dropped": {"bad_question": 1, "inspector_unparseable": 1, "uninformative_image": 1},
    }
    records = [
        json.loads(line) for line in (tmp_path / "run" / "inspect.jsonl").read_text().splitlines()
    ]
    unparseable = next(r for r in records if r["reason"] == "inspector_unparseable")
    assert (
        unparseable["image"] == {"reply": "Probably yes", "verdict": None}
        and unparseable["calls"] == 1
    )


def test_cli_takes_presets_files_and_overrides_through_the_one_loader(tmp_path: Path) -> None:
    listed = CliRunner().invoke(app, ["presets", "ls", "curate"])
    assert listed.exit_code == 0 and "local-vllm" in listed.output
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        json.dumps({"out": "run", "sources": [{"kind": "world", "skills": ["search"], "n": 2}]})
    )
    shown = CliRunner().invoke(
        app,
        [
            "curate",
            "run",
            "local-vllm",
            str(sources),
            "filter.k=8",
            "episode.max_turns=3",
            "--print-config",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert "max_turns: 3" in shown.output and "exec_timeout_s: 15" in shown.output
    assert (
        "k: 8" in shown.output
        and "Qwen2.5-VL-72B-Instruct" in shown.output
        and f"{tmp_path}/run" in shown.output
    )
    bad = CliRunner().invoke(app, ["curate", "run", "local-vllm", str(sources), "filter.k=many"])
    assert bad.exit_code == 2 and "filter.k: expected a whole number" in bad.output
