"""Record VLMEvalKit's own per-sample verdicts on messy predictions, as test fixtures.

    .venv/bin/python scripts/record_vlmevalkit_verdicts.py /path/to/VLMEvalKit \\
        > tests/eval/fixtures/vlmevalkit_verdicts.jsonl

The checkout must be at commit e8e78f05f3080fe28154f2130321f17951c3be94 (``git archive`` of it is
enough: only ``vlmeval/`` is read). This script imports VLMEvalKit's real scoring functions and
calls them on the cases in `cases()`; ``tests/eval/test_vlmevalkit_verdicts.py`` scores the same
cases with codedance's ``--scoring vlmevalkit`` and compares.

What runs unchanged from the checkout: ``vlmeval/utils/matching_util.py`` (``can_infer`` ...),
``vlmeval/smp/log.py``, ``vlmeval/smp/vlm.py`` (``build_option_str``), ``vlmeval/smp/misc.py`` (two
imports replaced, below) and ``vlmeval/dataset/utils/{mathvista,mathv,mathverse,wemath,vqa_eval,
multiple_choice}.py``; ``auxeval`` from ``vlmeval/dataset/charxiv.py`` and ``CountBenchQA.evaluate``
from ``vlmeval/dataset/image_vqa.py`` are cut out of their files with ``ast`` and run as written.

Stubs (package glue only; no scoring logic): the packages ``vlmeval``, ``vlmeval.smp``,
``vlmeval.utils``, ``vlmeval.dataset`` and ``vlmeval.dataset.utils`` are created empty instead of
running their ``__init__`` (which imports every model and dataset); ``vlmeval.smp.file`` gets a
``load`` that returns the DataFrame it is given and a no-op ``dump``; ``vlmeval.utils`` gets a
serial ``track_progress_rich``; in ``misc.py`` the imports of ``huggingface_hub``'s cache scanner
and ``sty`` (colour output) are replaced by None; ``timeout_decorator.timeout`` (a 30 s limit around
MATH-V's ``is_equal``) is the identity when the package is not installed. The judge is a scripted
object: ``generate`` returns the case's ``judge_replies`` in order (``null`` = an API failure, i.e.
VLMEvalKit's FAIL_MSG), and the number of calls is recorded.

Each output line: benchmark, id, row (the TSV fields, no image), prediction, judge_replies (absent
for judge-free cases), vlmevalkit (``score``: 0/1/0.5, or null when VLMEvalKit would need a judge;
``judge_calls``), note.
"""

from __future__ import annotations

import ast
import json
import random
import sys
import types
from pathlib import Path

FAIL_MSG = "Failed to obtain answer via API."


def _package(name: str, path: Path | None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)] if path else []  # type: ignore[attr-defined]
    sys.modules[name] = module
    return module


def _exec_source(name: str, source: str, filename: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - VLMEvalKit's own file
    return module


def _cut(path: Path, name: str, namespace: dict) -> object:
    """A top-level function, or ``Class.method``, cut out of a file and defined in ``namespace``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls, _, fn = name.rpartition(".")
    nodes = tree.body
    if cls:
        nodes = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == fn)
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102 - VLMEvalKit's own code
    return namespace[fn]


def load_vlmevalkit(root: Path) -> dict:
    """Import VLMEvalKit's scoring functions from checkout ``root`` (see the module docstring)."""
    import pandas as pd

    vm = root / "vlmeval"
    _package("vlmeval", vm)
    smp = _package("vlmeval.smp", vm / "smp")
    _package("vlmeval.dataset", vm / "dataset")
    _package("vlmeval.dataset.utils", vm / "dataset" / "utils")
    utils = _package("vlmeval.utils", vm / "utils")
    from vlmeval.smp import log

    file = types.ModuleType("vlmeval.smp.file")
    file.load = lambda data, *a, **k: data  # type: ignore[attr-defined]
    file.dump = lambda *a, **k: None  # type: ignore[attr-defined]
    file.get_intermediate_file_path = lambda *a, **k: "unused"  # type: ignore[attr-defined]
    file.get_pred_file_format = lambda: "xlsx"  # type: ignore[attr-defined]
    sys.modules["vlmeval.smp.file"] = file
    misc_src = (vm / "smp" / "misc.py").read_text(encoding="utf-8")
    misc_src = misc_src.replace(
        "from huggingface_hub.utils._cache_manager import _scan_cached_repo",
        "_scan_cached_repo = None",
    ).replace("from sty import fg", "fg = None")
    misc = _exec_source("vlmeval.smp.misc", misc_src, str(vm / "smp" / "misc.py"))
    from vlmeval.smp import vlm

    for module in (log, misc, vlm, file):
        for key, value in vars(module).items():
            if not key.startswith("__"):
                setattr(smp, key, value)
    import vlmeval.utils.matching_util as matching

    for key in (
        "can_infer",
        "can_infer_lego",
        "can_infer_option",
        "can_infer_text",
        "can_infer_sequence",
    ):
        setattr(utils, key, getattr(matching, key))
    utils.track_progress_rich = lambda fn, tasks, **k: [
        fn(**t) if isinstance(t, dict) else fn(*t) for t in tasks
    ]
    try:
        import timeout_decorator  # noqa: F401
    except ImportError:
        stub = types.ModuleType("timeout_decorator")
        stub.timeout = lambda *a, **k: lambda fn: fn  # type: ignore[attr-defined]
        sys.modules["timeout_decorator"] = stub
    import vlmeval.dataset.utils.multiple_choice as mc
    import vlmeval.dataset.utils.vqa_eval as vqa
    from vlmeval.dataset.utils import mathv, mathverse, mathvista, wemath

    charxiv_ns = {"json": json, "Any": object, "Dict": dict, "pd": pd}
    countbench_ns = {
        "load": lambda d: d,
        "dump": lambda *a: None,
        "d2df": misc.d2df,
        "get_intermediate_file_path": lambda *a, **k: "unused",
    }
    return {
        "mathvista": mathvista,
        "mathv": mathv,
        "mathverse": mathverse,
        "mc": mc,
        "vqa": vqa,
        "wemath": wemath,
        "charxiv_auxeval": _cut(vm / "dataset" / "charxiv.py", "auxeval", charxiv_ns),
        "countbench_evaluate": _cut(
            vm / "dataset" / "image_vqa.py", "CountBenchQA.evaluate", countbench_ns
        ),
    }


class ScriptedJudge:
    """VLMEvalKit's judge interface: ``generate`` returns the scripted replies in order."""

    def __init__(self, replies: list[str | None]) -> None:
        self.replies = list(replies)
        self.calls = 0

    def generate(self, prompt: object, **kwargs: object) -> str:
        self.calls += 1
        if not self.replies:
            return FAIL_MSG
        reply = self.replies.pop(0)
        return FAIL_MSG if reply is None else reply


def score(vk: dict, case: dict) -> dict:
    """VLMEvalKit's verdict on one case."""
    import pandas as pd

    bench, row, pred = case["benchmark"], dict(case["row"]), case["prediction"]
    replies = case.get("judge_replies")
    judge = ScriptedJudge(replies) if replies is not None else None
    line = pd.Series({**row, "prediction": pred})
    result: float | None
    if bench == "countbench":
        frame = pd.DataFrame([{"index": 0, "answer": row["answer"], "prediction": pred}])
        result = vk["countbench_evaluate"](None, frame)["accuracy"] / 100
    elif bench == "chartqa":
        result = float(max(vk["vqa"].process_line(line, method="relaxed_accuracy")["match"]))
    elif bench in ("vstar", "hrbench") or (bench == "wemath" and judge is not None):
        item = pd.Series({**row, "prediction": pred, "GT": row["answer"]})
        random.seed(0)
        out = vk["mc"].eval_vanilla(
            judge, item, dataset_name={"wemath": "WeMath"}.get(bench, "VStarBench")
        )
        result = float(out["hit"])
        if "randomly generate" in out["log"]:
            return {
                "score": None,
                "random_fallback": True,
                "judge_calls": judge.calls if judge else 0,
            }
    elif bench == "wemath":
        frame = pd.DataFrame([{**row, "prediction": pred}])
        result = float(bool(vk["wemath"].load_and_process_data(frame)["joker"].iloc[0]))
    elif bench in ("mathvista", "mathvision"):
        module = vk["mathvista"] if bench == "mathvista" else vk["mathv"]
        aux = module.MathVista_auxeval if bench == "mathvista" else module.MATH_V_auxeval
        prefetch = module.post_check(line, prefetch=True)
        if not prefetch and judge is None:
            result = None
        else:
            out = aux(judge, line)
            result = float(
                bool(
                    module.post_check(
                        pd.Series({**line.to_dict(), "res": out["res"]}), prefetch=False
                    )
                )
            )
    elif bench == "mathverse":
        extract = vk["mathverse"].MathVerse_auxeval_extract(judge, line)["extract"]
        verdict = vk["mathverse"].MathVerse_auxeval_score(
            judge, pd.Series({**line.to_dict(), "extract": extract})
        )
        result = float(bool(verdict["score"]))
    elif bench == "charxiv":
        result = float(vk["charxiv_auxeval"](judge, line)["score"])
    else:
        raise ValueError(bench)
    return {"score": result, "judge_calls": judge.calls if judge else 0}


def _mcq_rows(bench: str) -> list[dict]:
    colours = {"A": "red", "B": "blue", "C": "white", "D": "black"}
    base = {
        "question": "What is the color of the umbrella?",
        "category": "direct_attributes",
        **colours,
    }
    if bench == "hrbench":
        base |= {"category": "single", "cycle_category": "c0"}
    return [
        {**base, "index": "0", "answer": "B"},
        {**base, "index": "1", "answer": "D"},
        {
            **base,
            "index": "2",
            "answer": "A",
            "A": "2",
            "B": "3",
            "C": "4",
            "D": "5",
            "question": "How many cups are on the table?",
        },
    ]


_MCQ_PREDICTIONS = [
    "B",
    "(B)",
    "B.",
    "**B**",
    "b",
    "the answer is b",
    "The answer is black",
    "The answer is definitely blue",
    "The answer is a blue umbrella",
    "blue",
    "Blue.",
    "It is blue",
    "red or blue",
    "A or B",
    "Looking closely at the image, the umbrella appears to be blue.",
    (
        "Answer: B\nExplanation: the umbrella near the top left corner of the photo is blue, a "
        "person holds it"
    ),
    "The answer is A. No wait, the answer is B.",
    "The answer is (A) or (B)",
    "I think it is C, but it could also be D. Final answer: C",
    "There are 4.",
    "4",
    "Cannot determine the answer",
    "Z",
    "D) black",
    "Option D",
    "none of them",
    "",
]


def _case(benchmark: str, row: dict, prediction: str, replies: list | None = None) -> dict:
    """One case: a row of `benchmark` and a prediction, with the judge's scripted replies (a
    case without ``judge_replies`` is scored by the rules alone)."""
    case = {"benchmark": benchmark, "row": row, "prediction": prediction}
    return case if replies is None else {**case, "judge_replies": replies}


def _mcq_cases(bench: str) -> list[dict]:
    rows = _mcq_rows(bench)
    cases = []
    for n, pred in enumerate(_MCQ_PREDICTIONS):
        row = rows[2] if pred in ("There are 4.", "4") else rows[n % 2]
        cases.append(_case(bench, row, pred))
    judge_row = rows[0]
    for pred, replies in (
        ("it looks bluish to me", ["B"]),
        ("it looks bluish to me", ["The answer is B"]),
        ("a kind of crimson", ["Z"]),
        ("it is the dark one, like the night sky", ["D"]),
        ("no idea", ["A", "B"]),
        ("azure", [None, "B"]),
    ):
        cases.append(_case(bench, judge_row, pred, replies))
    return cases


def cases() -> list[dict]:
    """The messy cases, ≥ 20 per benchmark (see the module docstring)."""
    out: list[dict] = []
    for pred, gold in (
        ("3", "3"),
        ("13", "3"),
        ("There are 3 dogs.", "3"),
        ("three", "3"),
        ("3.0", "3"),
        ("33", "3"),
        ("2", "3"),
        ("1,200", "1200"),
        ("1200", "1200"),
        ("12", "12"),
        ("5 or 6", "5"),
        ("15", "5"),
        ("five", "5"),
        ("", "4"),
        ("4 apples", "4"),
        (" 7 ", "7"),
        ("seven (7)", "7"),
        ("10", "1"),
        ("0", "0"),
        ("None", "0"),
        ("I count 8.", "8"),
    ):
        out.append(
            _case("countbench", {"index": "0", "question": "How many?", "answer": gold}, pred)
        )
    out += _mcq_cases("vstar") + _mcq_cases("hrbench")
    for pred, gold in (
        ("12.4", "12"),
        ("12.7", "12"),
        ("Yes", "Yes"),
        ("yes", "Yes"),
        (" yes ", "Yes"),
        ("45%", "0.45"),
        ("0.45", "45%"),
        ("0.0", "0"),
        ("0", "0"),
        ("Cable TV", "Cable TV "),
        ("Cable TV", "[Cable TV]"),
        ("b", "['a', 'b']"),
        ("2,000", "2000"),
        ("2000", "2000"),
        ("1e3", "1000"),
        ("1_000", "1000"),
        ("nan", "5"),
        ("-5", "5"),
        ("5.2", "-5"),
        ("2019", "[2018, 2019]"),
        ("19%", "19"),
        ("Brazil", "brazil"),
        ("", "3"),
    ):
        out.append(
            _case(
                "chartqa", {"index": "0", "question": "Q?", "answer": gold, "split": "human"}, pred
            )
        )
    wemath_row = {
        "index": "0",
        "ID": "1",
        "key": "2steps_1",
        "question": "What is the area?",
        "A": "4 cm",
        "B": "6 cm",
        "C": "8 cm",
        "D": "10 cm",
        "answer": "B",
        "knowledge concept": "area",
    }
    for pred in (
        "B",
        "(B)",
        "**B**",
        "The answer is B",
        "6 cm",
        "Answer: B",
        "Answer: C. 8 cm",
        "<Answer>: <<B>>",
        "Answer: (B)",
        "B. 6 cm",
        "b",
        "Answer",
        "answer: B",
        "The Answer is B.",
        "\\boxed{B}",
        "Answer: \\boxed{B}",
        "A or B",
        "Answer: B\nAnswer: C",
        "..B",
        "H",
        "",
    ):
        out.append(_case("wemath", wemath_row, pred))
    for pred, replies in (
        ("(B)", []),
        ("It is 6 cm long", ["B"]),
        ("no idea", ["Z"]),
        ("maybe 7", ["C"]),
    ):
        out.append(_case("wemath", wemath_row, pred, replies))
    mv_mc = {
        "index": "0",
        "question": "Hint: Please answer the question and provide the correct option letter.\n"
        "Question: What fraction is shaded?\nChoices:\n(A) 1/4\n(B) 3/8\n(C) 1/2\n(D) 2/3",
        "answer": "1/2",
        "answer_option": "C",
        "choices": "['1/4', '3/8', '1/2', '2/3']",
        "question_type": "multi_choice",
        "answer_type": "text",
        "precision": "",
        "task": "figure question answering",
        "skills": "['arithmetic reasoning']",
    }
    mv_int = {
        **mv_mc,
        "question": "How many bars are above 10?",
        "answer": "4",
        "answer_option": "",
        "choices": "[]",
        "question_type": "free_form",
        "answer_type": "integer",
    }
    mv_zero = {**mv_int, "answer": "0"}
    mv_float = {
        **mv_int,
        "question": "How much? (Unit: $)",
        "answer": "1.45",
        "answer_type": "float",
        "precision": "2",
    }
    mv_list = {
        **mv_int,
        "question": "Between which two years?",
        "answer": "[2007, 2008]",
        "answer_type": "list",
    }
    for row, pred in (
        (mv_mc, "C"),
        (mv_mc, "(C) 1/2"),
        (mv_mc, "1/2"),
        (mv_mc, "B"),
        (mv_mc, "The answer is a"),
        (mv_mc, "the answer is c"),
        (mv_mc, "I think C or D"),
        (mv_int, "4"),
        (mv_int, "5"),
        (mv_int, "4.0"),
        (mv_int, "four"),
        (mv_int, " 4 "),
        (mv_zero, "0"),
        (mv_float, "1.45"),
        (mv_float, "1.449"),
        (mv_float, "1.4500001"),
        (mv_float, "1.450"),
        (mv_float, "$1.45"),
        (mv_list, "[2007, 2008]"),
        (mv_int, "There are 4 bars."),
    ):
        out.append(_case("mathvista", row, pred))
    for row, pred, replies in (
        (mv_int, "There are 4 bars.", ["4"]),
        (mv_float, "about 1.449 dollars", ["1.449"]),
        (mv_float, "Luca needs $1.45.", ["1.45"]),
        (mv_mc, "I would go with 1/2", ["C"]),
        (mv_mc, "hmm", [None, None, "D"]),
        (mv_zero, "0", ["0"]),
        (mv_list, "2007 and 2008", ["[2007, 2008]"]),
        (mv_int, "no idea", [None, None, None, None, None]),
    ):
        out.append(_case("mathvista", row, pred, replies))
    mvi_mc = {
        "index": "0",
        "question": "Which picture shows the kittens?\n<image1>",
        "answer": "D",
        "choices": "['A', 'B', 'C', 'D', 'E']",
        "category": "logic",
        "level": "2",
    }
    mvi_mc_text = {**mvi_mc, "choices": "['$3$', '$4$', '$5$', '$6$', '$7$']", "answer": "B"}
    mvi_free = {
        "index": "1",
        "question": "How many digits?",
        "answer": "6",
        "choices": "[]",
        "category": "counting",
        "level": "1",
    }
    mvi_frac = {**mvi_free, "answer": "\\frac{1}{2}"}
    mvi_sqrt = {**mvi_free, "answer": "2\\sqrt{3}"}
    mvi_pair = {**mvi_free, "answer": "(3,-4)"}
    for row, pred in (
        (mvi_mc, "D"),
        (mvi_mc, "(D)"),
        (mvi_mc, "d"),
        (mvi_mc, "B"),
        (mvi_mc, "The answer is E"),
        (mvi_mc, "The answer is E because D is too small"),
        (mvi_mc_text, "4"),
        (mvi_mc_text, "$4$"),
        (mvi_free, "6"),
        (mvi_free, "6.0"),
        (mvi_free, "6 cm"),
        (mvi_free, "x = 6"),
        (mvi_free, "six"),
        (mvi_free, "12/2"),
        (mvi_free, "2^3"),
        (mvi_frac, "0.5"),
        (mvi_frac, "1/2"),
        (mvi_frac, "\\frac12"),
        (mvi_sqrt, "\\sqrt{12}"),
        (mvi_sqrt, "2\\sqrt{3}"),
        (mvi_sqrt, "2 \\sqrt{3}"),
        (mvi_pair, "(3,-4)"),
        (mvi_pair, "(3, -4)"),
        (mvi_free, "1,000"),
    ):
        out.append(_case("mathvision", row, pred))
    for row, pred, replies in (
        (mvi_free, "The answer is 6", ["6"]),
        (mvi_free, "six", ["6"]),
        (mvi_sqrt, "\\sqrt{12}", ["\\sqrt{12}"]),
        (mvi_mc, "B", ["D"]),
        (mvi_mc_text, "it is four", ["4"]),
        (mvi_mc_text, "it is four", ["B"]),
        (mvi_free, "no idea", [None, None, None, None, None]),
    ):
        out.append(_case("mathvision", row, pred, replies))
    mverse = {
        "index": "0",
        "question": "As shown, find BC.",
        "question_for_eval": "Circle O, BAC = 60. BC = ?",
        "answer": "C",
        "problem_version": "Vision Only",
        "question_type": "multi-choice",
        "metadata": "{'subject': 'plane geometry', 'subfield': 'length'}",
    }
    mverse_free = {**mverse, "answer": "2\\sqrt{3}", "question_type": "free-form"}
    for row, pred, replies in (
        (mverse, "C", ["C"]),
        (mverse, "C", ["C."]),
        (mverse, "The answer is C", ["C", "1"]),
        (mverse, "B", ["B", "0"]),
        (mverse, "B", ["B", "Judgement: 1"]),
        (mverse, "B", ["B", "1."]),
        (mverse, "B", ["B", "**1**"]),
        (mverse, "B", ["B", "1\nBecause both are C.", "0"]),
        (mverse, "x", ["x", "no", "no", "no", "no", "no"]),
        (mverse, "x", [None, "C"]),
        (mverse_free, "2√3", ["2√3", "1"]),
        (mverse_free, "2\\sqrt{3}", ["2\\sqrt{3}"]),
        (mverse_free, "about 3.46", ["3.46", " 1 "]),
        (mverse_free, "3.46", ["3.46", "0"]),
        (mverse_free, "sqrt 12", ["sqrt 12", "1"]),
        (mverse, "C", ["null", "0"]),
        (mverse_free, "hmm", [None, None, None, None, None, "x", "0"]),
        (mverse, "D", ["D", "0\n"]),
        (mverse, "C", [" C "]),
        (mverse_free, "2sqrt3", ["2sqrt3", "yes", "1"]),
    ):
        out.append(_case("mathverse", row, pred, replies))
    cx = {
        "index": "0",
        "question": "What is the peak?",
        "answer": "3.5",
        "inst_category": "3",
        "grading_query": "Compare. Model answer: {PREDICTION}. Reply with JSON.",
    }
    for pred, replies in (
        ("3.5", ['{"extracted_answer": "3.5", "score": 1}']),
        ("3", ['{"extracted_answer": "3", "score": 0}']),
        ("3.4", ['{"extracted_answer":"3.4","score":0.5}']),
        ("3.5", ['```json\n{"extracted_answer": "3.5", "score": 1}\n```']),
        ("3.5", ['{"score": 1}']),
        ("3.5", ['{"extracted_answer": "3.5"}']),
        ("3.5", ["not json", '{"extracted_answer": "3.5", "score": 1}']),
        ("3.5", ["{'extracted_answer': '3.5', 'score': 1}"]),
        ("3.5", ["[1, 0]"]),
        ("3.5", ['{"extracted_answer": "3.5", "score": 1} thanks']),
        ("3.5", ['{"extracted_answer": "3.5", "score": true}']),
        ("3.5", [None, '{"extracted_answer": "3.5", "score": 1}']),
        ("3.5", ["no"] * 10),
        ("3.5", ["no"] * 9 + ['{"extracted_answer": "3.5", "score": 1}']),
        ("3.5", ['  {"extracted_answer": "3.5", "score": 1}\n']),
        ("three and a half", ['{"extracted_answer": "3.5", "score": 1.0}']),
        ("3.5", ['{"extracted_answer": null, "score": 0}']),
        ("3.5", ['{"score": 1, "extracted_answer": 3.5, "x": 2}']),
        ("3.5", ['"{\\"score\\": 1}"']),
        ("3.5", ['{"extracted_answer": "3.5", "score": 0.25}']),
    ):
        out.append(_case("charxiv", cx, pred, replies))
    return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(
            "usage: record_vlmevalkit_verdicts.py /path/to/VLMEvalKit (a checkout of e8e78f0)"
        )
    vk = load_vlmevalkit(Path(sys.argv[1]))
    counts: dict[str, int] = {}
    for case in cases():
        counts[case["benchmark"]] = counts.get(case["benchmark"], 0) + 1
        case["id"] = f"{case['benchmark']}-{counts[case['benchmark']]}"
        case["vlmevalkit"] = score(vk, case)
        print(json.dumps(case, ensure_ascii=False))
    print(json.dumps(counts), file=sys.stderr)


if __name__ == "__main__":
    main()
