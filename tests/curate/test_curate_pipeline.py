"""The whole curate pipeline over real HTTP and the real sandbox, with replay servers playing the
weak, strong and judge models (their choices scripted per question, everything else real).

Source: six world search tasks (medium/hard), three bundled MathVision testmini items, and a
duplicate world source. Each item is scripted to exercise one path of a stage.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from codedance.curate import parse_config, plan, run_curate
from codedance.curate.filtering import UNDECIDED_KINDS
from codedance.policy.replay_server import ReplayServer, ServerReply
from codedance.policy.wire import data_url
from codedance.rollout import Episode, EpisodeConfig
from codedance.world import task_set

pytestmark = pytest.mark.tier("integration")

MATHV = Path("/work/shared/data/mathvision-testmini")
K = 4


@functools.cache
def _world():
    return task_set(6, 0, ["search"], ["medium", "hard"])


@functools.cache
def _mathv():
    from codedance.eval.loaders import load_benchmark
    from codedance.eval.spec import get_spec

    return load_benchmark(get_spec("mathvision_mini"), path=MATHV, limit=3)


def _question(body: dict) -> str:
    """The text of the request's first user message (the task's question is in it)."""
    user = next(m for m in body["messages"] if m["role"] == "user")
    content = user["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def _image_hash(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


def _first_image(body: dict) -> str:
    user = next(m for m in body["messages"] if m["role"] == "user")
    return _image_hash(
        next(p["image_url"]["url"] for p in user["content"] if p.get("type") == "image_url")
    )


class Models:
    """Scripts for the three servers: `plans` maps a task to its role in the test."""

    def __init__(self, plans: dict[str, dict]) -> None:
        self.plans = plans
        self.counts: Counter[tuple[str, str]] = Counter()

    def _plan(self, body: dict) -> tuple[str, dict]:
        image = _first_image(body)  # questions repeat across world tasks; images do not
        for tid, p in self.plans.items():
            if p["image"] == image and p["question"] in _question(body):
                return tid, p
        raise AssertionError(f"no plan for {_question(body)[:200]!r}")

    def _direct(self, role: str, body: dict) -> ServerReply | str:
        tid, p = self._plan(body)
        n = self.counts[(role, tid)]
        self.counts[(role, tid)] += 1
        if p.get(f"{role}_malformed"):
            return ServerReply(raw=b"<html>bad gateway page</html>")
        said = (
            p["answer"]
            if n < p[role]
            else p["paraphrase"]
            if n < p[role] + p.get(f"{role}_paraphrase", 0)
            else "nothing"
        )
        return f"<think>look</think>\n<answer>{said}</answer>"

    def weak(self, body: dict) -> ServerReply | str:
        return self._direct("weak", body)

    def strong(self, body: dict) -> ServerReply | str:
        text = _question(body)
        if "Revise your solution" in text:  # text only: find the item by its question
            return next(
                p["revision"]
                for p in self.plans.values()
                if "revision" in p and p["question"] in text
            )
        if "Solve the problem in the image step by step" in text:
            return self._plan(body)[1]["cot"]
        if "Locate every region" in text:
            return self._plan(body)[1]["boxes"]
        if any(m["role"] == "assistant" for m in body["messages"]):  # the trajectory's last turn
            _, p = self._plan(body)
            return f"<think>The zoomed crop shows it.</think>\n<answer>{p['final']}</answer>"
        return self._direct("strong", body)

    def judge(self, body: dict) -> ServerReply | str:
        if "CONSISTENT or INCONSISTENT" in _question(body):  # the cross-check sees the task's image
            return self._plan(body)[1].get("cross", "CONSISTENT.")
        item = _question(body).rsplit("[Question]:", 1)[1]
        if item.rstrip().endswith(
            "[Model answer]: nothing\nJudgement:"
        ):  # the filter's wrong answers
            return "Judgement: 0"
        for p in self.plans.values():
            if (
                "paraphrase" in p
                and p["question"] in item
                and f"[Model answer]: {p['paraphrase']}" in item
            ):
                return "Judgement: 1"
            if p["question"] in item and "final" in p and f"[Model answer]: {p['final']}" in item:
                return p["judge"]
        raise AssertionError(f"judge asked about an unplanned item: {item[:200]!r}")


def _boxes(*entries: tuple[str, list[int]]) -> str:
    return "```json\n" + json.dumps([{"label": lab, "bbox_2d": b} for lab, b in entries]) + "\n```"


def _plans() -> dict[str, dict]:
    w = _world()
    m = _mathv()
    width, height = Episode(w[0], EpisodeConfig()).images[0].size
    good = [100, 100, 300, 260]
    plans = {
        # easy: the weak model solves 2/4 by the rules and 2/4 in words the rules reject and the
        # judge accepts (one judge request for the two) -> a direct-answer example, accepted by
        # the rules
        w[0].id: {
            "weak": 2,
            "weak_paraphrase": 2,
            "paraphrase": f"the purple-framed tag reads {w[0].answer}",
        },
        # medium: weak 1/4, strong 3/4; one plausible box -> one code turn -> correct
        w[1].id: {
            "weak": 1,
            "strong": 3,
            "final": w[1].answer,
            "boxes": _boxes(("green tag", good)),
        },
        # hard: strong 1/4; four implausible boxes and one plausible; the answer is a paraphrase
        # the rules reject and the judge accepts
        w[2].id: {
            "weak": 0,
            "strong": 1,
            "final": f"tag {w[2].answer} (purple)",
            "judge": "Judgement: 1",
            "boxes": _boxes(
                ("purple tag", [-20, 10, 200, 200]),
                ("purple tag", [0, 0, width, height]),
                ("sky", [400, 400, 600, 600]),
                ("purple tag", [50, 50, 52, 300]),
                ("small purple tag", good),
            ),
        },
        # hard: every box implausible -> no_plausible_box
        w[3].id: {"weak": 0, "strong": 0, "boxes": _boxes(("green tag", [10, 10, width + 50, 90]))},
        # medium: the box reply is not JSON -> boxes_unparseable
        w[4].id: {"weak": 0, "strong": 4, "boxes": "I think the tag is near the top left."},
        # hard: wrong answer and the judge's reply is no verdict -> judge_unparseable
        w[5].id: {
            "weak": 0,
            "strong": 0,
            "final": "no idea",
            "judge": "It might be right.",
            "boxes": _boxes(("blue tag", good)),
        },
        # MathVision (recipe math): easy, but the cross-check finds its reasoning inconsistent;
        # medium: the CoT revised into two code steps the sandbox runs one turn each; both real
        # outputs agree with the revision's claims, so its closing text is the answer turn; weak
        # replies malformed
        m[0].id: {"weak": 4, "cross": "**INCONSISTENT**"},
        m[1].id: {
            "weak": 0,
            "strong": 3,
            "final": m[1].answer,
            "cot": f"1. Each daisy adds 13.\n2. 48 + 13 = 61.\n<answer>{m[1].answer}</answer>",
            "revision": (
                "1. Each daisy adds 13.\n"
                "<code>\n```python\nstep = 61 - 48\nprint('step:', step)\n```\n</code>\n"
                "<interpreter>step: 13</interpreter>\n2. The last daisy is 48 plus one step.\n"
                "<code>\n```python\nlast = 48 + 13\nprint('48 + 13 =', last)\n```\n</code>\n"
                "<interpreter>\n48 + 13 = 61\n</interpreter>\nSo the last daisy holds 61.\n"
                f"<answer>\\boxed{{{m[1].answer}}}</answer>"
            ),
        },
        m[2].id: {"weak_malformed": True},
    }
    tasks = {t.id: t for t in (*w, *m)}
    for tid, p in plans.items():
        t = tasks[tid]
        p["question"] = t.question[-60:]
        p["answer"] = t.answer
        p["image"] = _image_hash(data_url(Episode(t, EpisodeConfig()).images[0]))
        p.setdefault("strong", 0)
    return plans


@pytest.fixture(scope="module")
def servers():
    models = Models(_plans())
    with (
        ReplayServer(models.weak, ("weak-7b",)) as weak,
        ReplayServer(models.strong, ("strong-72b",)) as strong,
        ReplayServer(models.judge, ("judge-72b",)) as judge,
    ):
        yield {"weak": weak, "strong": strong, "judge": judge, "models": models}


def _config(out: Path, servers: dict, **overrides: object) -> dict:
    raw = {
        "out": str(out),
        "endpoints": {
            role: {"url": servers[role].url, "model": name, "max_in_flight": 8, "retries": 0}
            for role, name in (
                ("weak", "weak-7b"),
                ("strong", "strong-72b"),
                ("judge", "judge-72b"),
            )
        },
        "sources": [
            {
                "kind": "world",
                "name": "world",
                "skills": ["search"],
                "difficulties": ["medium", "hard"],
                "n": 6,
            },
            {
                "kind": "benchmark",
                "name": "mathvision_mini",
                "path": str(MATHV),
                "limit": 3,
                "recipe": "math",
            },
            {
                "kind": "world",
                "name": "again",
                "skills": ["search"],
                "difficulties": ["medium"],
                "n": 1,
            },
        ],
        "filter": {"k": K, "easy_threshold": 0.75, "medium_threshold": 0.5, "easy_keep": 1.0},
        "verify": {"judge": True, "cross_check": True},
        "sandboxes": 2,
    }
    raw.update(overrides)
    return raw


@pytest.fixture(scope="module")
def run(servers, tmp_path_factory):
    if not (MATHV / "data" / "testmini.jsonl").is_file():
        pytest.skip(f"{MATHV} (shared MathVision testmini) is not present")
    out = tmp_path_factory.mktemp("curate") / "run"
    config = parse_config(_config(out, servers))
    result = run_curate(config, stream=None)
    sent = {role: len(servers[role].requests) for role in ("weak", "strong", "judge")}
    bodies = {role: list(servers[role].requests) for role in ("weak", "strong", "judge")}
    return {"config": config, "result": result, "out": out, "sent": sent, "bodies": bodies}


def _records(out: Path, stage: str) -> dict[str, dict]:
    return {r["key"]: r for r in map(json.loads, (out / f"{stage}.jsonl").read_text().splitlines())}


def _by_task(out: Path, stage: str) -> dict[str, dict]:
    return {r["task_id"]: r for r in _records(out, stage).values()}


def test_sources_are_deduplicated_and_filter_records_every_answer(run) -> None:
    report = json.loads((run["out"] / "report.json").read_text())
    assert report["items"] == 9
    assert report["sources"] == {
        "world.read": 6,
        "mathvision_mini.read": 3,
        "again.read": 1,
        "again.duplicates": 1,
    }
    w, m = _world(), _mathv()
    f = _by_task(run["out"], "filter")
    easy = f[w[0].id]["weak"]
    assert [s["correct"] for s in easy] == [True] * 4 and f[w[0].id]["difficulty"] == "easy"
    assert [s["graded_by"] for s in easy].count("judge") == 2
    assert all(
        s["judge"] == {"verdict": True, "reply": "Judgement: 1"}
        for s in easy
        if s["graded_by"] == "judge"
    )
    assert f[w[0].id]["calls"] == K + 1  # the judge asked once for the two identical answers
    hard = f[w[3].id]["strong"]  # text answers the rules reject: the judge decides (and says no)
    assert all(s["graded_by"] == "judge" and s["judge"]["verdict"] is False for s in hard)
    assert "strong" not in f[w[0].id]  # easy items never reach the strong model
    assert f[w[1].id]["weak_rate"] == 0.25 and f[w[1].id]["strong_rate"] == 0.75
    assert f[w[1].id]["difficulty"] == "medium" and f[w[4].id]["difficulty"] == "medium"
    assert {f[t.id]["difficulty"] for t in (w[2], w[3], w[5])} == {"hard"}
    assert all(s["answer"] == "nothing" and not s["correct"] for s in f[w[3].id]["strong"])
    assert f[m[0].id]["difficulty"] == "easy" and f[m[1].id]["difficulty"] == "medium"
    bad = f[m[2].id]
    assert bad["reason"] == "no_valid_samples" and len(bad["weak"]) == K
    assert all("MalformedResponseError" in s["error"] for s in bad["weak"])


def test_atomic_stage_filters_boxes_and_runs_real_trajectories(run) -> None:
    w, m = _world(), _mathv()
    a = _by_task(run["out"], "atomic")
    assert a[w[0].id]["kind"] == "direct" and len(a[w[0].id]["trajectory"]["turns"]) == 1
    medium = a[w[1].id]
    turns = medium["trajectory"]["turns"]
    assert len(turns) == 2 and turns[0]["result"]["status"] == "ok"
    assert turns[0]["result"]["stdout"] == "green tag: (200, 160)\n"  # the sandbox's real output
    assert len(turns[0]["result"]["images"]) == 1
    hard = a[w[2].id]
    assert [b["problem"] for b in hard["boxes"]] == [
        "outside",
        "whole_image",
        "label_mismatch",
        "degenerate",
        "",
    ]
    hard_turns = hard["trajectory"]["turns"]
    assert len(hard_turns) == 3  # one crop turn, one contrast turn reusing its variable, the answer
    assert "contrast range:" in hard_turns[1]["result"]["stdout"]
    assert (
        a[w[3].id]["reason"] == "no_plausible_box"
        and a[w[3].id]["boxes"][0]["problem"] == "outside"
    )
    assert a[w[4].id]["reason"] == "boxes_unparseable"
    math = a[m[1].id]
    assert math["kind"] == "math" and [s["claimed"].strip() for s in math["revision"]["steps"]] == [
        "step: 13",
        "48 + 13 = 61",
    ]
    assert math["revision"]["agreed"] == [True, True] and math["revision"]["diverged_at"] is None
    math_turns = math["trajectory"]["turns"]
    assert (
        len(math_turns) == 3
    )  # one executed turn per calculating step, then the revision's answer
    assert (
        "1. Each daisy adds 13." in math_turns[0]["text"]
        and "<interpreter>" not in math_turns[0]["text"]
    )
    assert math_turns[0]["result"]["stdout"] == "step: 13\n"  # the sandbox's real outputs
    assert (
        math_turns[1]["result"]["stdout"] == "48 + 13 = 61\n"
        and "2. The last daisy" in math_turns[1]["text"]
    )
    assert (
        "So the last daisy holds 61." in math_turns[2]["text"] and math["calls"] == 2
    )  # CoT + revision
    assert m[2].id not in a


def test_verification_grades_by_rules_then_judge_and_replays(run) -> None:
    w, m = _world(), _mathv()
    v = _by_task(run["out"], "verify")
    assert {t: r["reason"] for t, r in v.items()} == {
        w[0].id: "",
        w[1].id: "",
        w[2].id: "",
        w[5].id: "judge_unparseable",
        m[0].id: "inconsistent_reasoning",
        m[1].id: "",
    }
    assert v[w[1].id]["graded_by"] == "rule" and v[w[2].id]["graded_by"] == "judge"
    # grading: only the two answers the rules rejected; cross-check: the five that replayed; the
    # filter: one request per item and distinct answer the rules rejected (text and math kinds)
    assert v[w[2].id]["calls"] == 2 and v[w[1].id]["calls"] == 1 and v[w[5].id]["calls"] == 1
    f = _by_task(run["out"], "filter").values()
    asked = {
        (r["key"], s["answer"])
        for r in f
        for s in [*r["weak"], *r.get("strong", ())]
        if s.get("graded_by") == "judge"
    }
    assert len(asked) >= 6 and run["sent"]["judge"] == len(asked) + 2 + 5
    cross = [b for b in run["bodies"]["judge"] if "CONSISTENT or INCONSISTENT" in _question(b)]
    hard = next(b for b in cross if "Next region" in _question(b) or "contrast" in _question(b))
    parts = hard["messages"][0]["content"]
    assert (
        sum(p.get("type") == "image_url" for p in parts) == 3
    )  # the task's image and both outputs


def test_exports_hold_relative_image_paths_and_report_counts(run) -> None:
    out = run["out"]
    assert run["result"].accepted == 4 and not run["result"].down
    sft = [json.loads(line) for line in (out / "sft.jsonl").read_text().splitlines()]
    trl = [json.loads(line) for line in (out / "trl.jsonl").read_text().splitlines()]
    swift = [json.loads(line) for line in (out / "swift.jsonl").read_text().splitlines()]
    assert len(sft) == len(trl) == len(swift) == 4
    for record in sft + trl:
        assert record["images"] and all(
            not Path(p).is_absolute() and (out / p).is_file() for p in record["images"]
        )
    assert {r["meta"]["difficulty"] for r in sft} == {"easy", "medium", "hard"}
    hard = next(r for r in sft if r["meta"]["difficulty"] == "hard")
    assert sum(r["content"].count("<image>") for r in hard["messages"]) == len(hard["images"]) == 3
    assert trl[0]["messages"][1]["content"][0] == {"type": "image"}
    report = json.loads((out / "report.json").read_text())
    assert report["stages"]["filter"] == {"done": 9, "kept": 8, "dropped": {"no_valid_samples": 1}}
    assert report["stages"]["atomic"]["dropped"] == {"boxes_unparseable": 1, "no_plausible_box": 1}
    assert report["difficulty"]["world"] == {"easy": 1, "hard": 3, "medium": 2}
    calls = report["calls_per_difficulty"]
    # weak samples + one cross-check each + the judge on the world item's paraphrase
    assert calls["easy"] == {"items": 2, "requests": 2 * K + 2 + 1}
    # medium: crop (2K filter + boxes + final + cross-check), bad boxes (2K + boxes),
    # math (2K + CoT + revision + cross-check: the revision's own closing answers); each item's
    # filter also asked the judge once about its wrong answer "nothing" (MathVision: if not a
    # choice)
    math_judged = int(_mathv()[1].kind in UNDECIDED_KINDS)
    assert calls["medium"] == {
        "items": 3,
        "requests": (2 * K + 3 + 1) + (2 * K + 1 + 1) + (2 * K + 3 + math_judged),
    }
    for role in ("weak", "strong", "judge"):
        assert report["endpoints"][role]["requests"] == run["sent"][role]
    assert report["accepted"] == 4 and any(not s["accepted"] for s in report["samples"])
    html = (out / "report.html").read_text()
    assert "judge_unparseable" in html and "<img src='images/" in html


def test_rerun_resumes_without_requests(run, servers) -> None:
    before = {role: len(servers[role].requests) for role in ("weak", "strong", "judge")}
    result = run_curate(run["config"], stream=None)
    assert {role: len(servers[role].requests) for role in ("weak", "strong", "judge")} == before
    assert result.accepted == 4
    assert plan(run["config"])["request_budget"] == {"weak": 0, "strong": 0, "judge": 0}


def test_breaker_stops_a_run_at_a_dead_endpoint_and_a_rerun_resumes(servers, tmp_path) -> None:
    raw = _config(tmp_path / "run", servers, stages=["filter"])
    raw["sources"] = raw["sources"][:1]
    raw["endpoints"]["weak"] = {
        "url": "http://127.0.0.1:9/v1",
        "model": "weak-7b",
        "retries": 0,
        "breaker_failures": 2,
        "max_in_flight": 1,
    }
    result = run_curate(parse_config(raw), stream=None)
    assert "endpoint weak" in result.down and "2 consecutive failures" in result.down
    assert not (tmp_path / "run" / "filter.jsonl").exists()
    raw["endpoints"]["weak"] = {"url": servers["weak"].url, "model": "weak-7b"}
    progress = io.StringIO()
    resumed = run_curate(parse_config(raw), stream=progress)
    assert not resumed.down and resumed.stage_counts["filter"]["done"] == 6
    lines = progress.getvalue().splitlines()  # one line per report, about every 5 % and at the end
    assert (
        lines[-1].startswith("curate: 6/6 items finished; filter 6/6 (elapsed ")
        and len(lines) <= 21
    )


def test_a_model_name_the_server_does_not_serve_trips_the_breaker(servers, tmp_path) -> None:
    raw = _config(tmp_path / "run", servers, stages=["filter"])
    raw["sources"] = raw["sources"][:1]
    raw["endpoints"]["weak"] = {
        "url": servers["weak"].url,
        "model": "no-such-model",
        "retries": 0,
        "breaker_failures": 2,
        "max_in_flight": 1,
    }
    result = run_curate(parse_config(raw), stream=None)
    assert "endpoint weak" in result.down and "2 consecutive failures" in result.down
    assert "does not serve model 'no-such-model'" in result.down
    assert not (tmp_path / "run" / "filter.jsonl").exists()  # no item recorded as unsolvable


def test_run_directory_holds_its_settings_and_refuses_other_ones(run, servers) -> None:
    from codedance.errors import SettingsError

    info = json.loads((run["out"] / "run.json").read_text())
    assert info["kind"] == "curate" and info["settings"]["filter"]["k"] == K
    assert info["settings"]["endpoints"]["weak"] == {
        "model": "weak-7b",
        "max_tokens": 1024,
        "temperature": 0.0,
    }
    changed = _config(run["out"], servers, filter={"k": K + 1, "easy_keep": 1.0})
    before = (run["out"] / "filter.jsonl").read_text()
    with pytest.raises(SettingsError, match=r"other settings \(filter\.k differ\)"):
        run_curate(parse_config(changed), stream=None)
    with pytest.raises(SettingsError, match="filter.k differ"):
        plan(parse_config(changed))
    assert (run["out"] / "filter.jsonl").read_text() == before
    assert json.loads((run["out"] / "run.json").read_text()) == info
