"""The eleven benchmarks of the paper (and their variants) as typed specs, plus per-sample scores.

`BENCHMARKS` maps our short names (``vstar``, ``hrbench4k``, ...) to a `BenchmarkSpec`: the
VLMEvalKit TSV name read from ``$LMUData``, the row count of the full file, which scorer applies,
whether the official metric needs an LLM judge, the paper table it belongs to, and where to get
the data. `SampleScore` is what scoring one trajectory produces; it crosses from
``codedance.eval.scoring`` to ``codedance.eval.metrics`` and into ``scores.jsonl``.

Not here: reading files (``codedance.eval.loaders``), the rules (``codedance.eval.scoring``).
"""

from __future__ import annotations

from dataclasses import dataclass

from codedance.errors import SettingsError

JUDGE_NONE = "none"  # the official metric is rule-based
JUDGE_FALLBACK = "fallback"  # rule first; the judge extracts the answer where the rule fails
JUDGE_ONLY = "only"  # the official metric is a judge verdict
JUDGE_UNREACHABLE = (
    "judge unreachable"  # a pending score's reason when --judge was given and never answered
)


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark (or one variant of it) and how it is scored.

    ``table`` is the paper table it belongs to (1: perception and counting, 2: charts and math;
    0: none, the ``tasks`` source: a Task JSONL given with ``--tasks``).
    ``headline`` names the metric shown in the tables (``accuracy`` unless the benchmark's
    official number is another one, e.g. WeMath's strict four-dimensional score).
    """

    name: str
    title: str
    vlmeval_name: str
    rows: int
    scorer: str
    judge: str = JUDGE_NONE
    table: int = 1
    headline: str = "accuracy"
    split: str = "test"
    source: str = ""


_LMU = "VLMEvalKit's data mirror (the URL is in vlmeval/dataset/*.py, DATASET_URL) into $LMUData"

BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec(
            "countbench",
            "CountBench",
            "CountBenchQA",
            491,
            "countbench",
            table=1,
            source=f"CountBenchQA.tsv from {_LMU}; or the HF export of vikhyatk/CountBenchQA",
        ),
        BenchmarkSpec(
            "pixmocount",
            "PixmoCount",
            "PixmoCount",
            540,
            "pixmocount",
            table=1,
            source="the HF export of allenai/pixmo-count (test split; parquet or JSONL with "
            "image_url, image_sha256, count, label); images fetched with --fetch-images",
        ),
        BenchmarkSpec(
            "vstar",
            "V* Bench",
            "VStarBench",
            191,
            "mcq",
            table=1,
            source="VStarBench.tsv from huggingface.co/datasets/xjtupanda/VStar_Bench",
        ),
        BenchmarkSpec(
            "hrbench4k",
            "HR-Bench 4K",
            "HRBench4K",
            800,
            "hrbench",
            table=1,
            source="hr_bench_4k.tsv from huggingface.co/datasets/DreamMr/HR-Bench, "
            "saved as HRBench4K.tsv",
        ),
        BenchmarkSpec(
            "hrbench8k",
            "HR-Bench 8K",
            "HRBench8K",
            800,
            "hrbench",
            table=1,
            source="hr_bench_8k.tsv from huggingface.co/datasets/DreamMr/HR-Bench, "
            "saved as HRBench8K.tsv",
        ),
        BenchmarkSpec(
            "chartqa",
            "ChartQA",
            "ChartQA_TEST",
            2500,
            "chartqa",
            table=2,
            source=f"ChartQA_TEST.tsv from {_LMU}",
        ),
        BenchmarkSpec(
            "charxiv",
            "CharXiv (RQ)",
            "CharXiv_reasoning_val",
            1000,
            "charxiv",
            judge=JUDGE_ONLY,
            table=2,
            split="val",
            source=f"CharXiv_reasoning_val.tsv from {_LMU}",
        ),
        BenchmarkSpec(
            "mathvista",
            "MathVista",
            "MathVista_MINI",
            1000,
            "mathvista",
            judge=JUDGE_FALLBACK,
            table=2,
            split="testmini",
            source=f"MathVista_MINI.tsv from {_LMU}",
        ),
        BenchmarkSpec(
            "mathvision",
            "MathVision",
            "MathVision",
            3040,
            "mathvision",
            judge=JUDGE_FALLBACK,
            table=2,
            source=f"MathVision.tsv from {_LMU}; or the MATH-V repository "
            "(github.com/mathllm/MATH-V: data/test.jsonl + images/)",
        ),
        BenchmarkSpec(
            "mathvision_mini",
            "MathVision (testmini)",
            "MathVision_MINI",
            304,
            "mathvision",
            judge=JUDGE_FALLBACK,
            table=2,
            split="testmini",
            source=f"MathVision_MINI.tsv from {_LMU}; or the MATH-V repository "
            "(data/testmini.jsonl + images/)",
        ),
        BenchmarkSpec(
            "mathverse",
            "MathVerse",
            "MathVerse_MINI_Vision_Only",
            788,
            "mathverse",
            judge=JUDGE_ONLY,
            table=2,
            split="testmini (vision-only)",
            source=f"MathVerse_MINI_Vision_Only.tsv from {_LMU}",
        ),
        BenchmarkSpec(
            "mathverse_all",
            "MathVerse (all versions)",
            "MathVerse_MINI",
            3940,
            "mathverse",
            judge=JUDGE_ONLY,
            table=2,
            split="testmini",
            source=f"MathVerse_MINI.tsv from {_LMU}",
        ),
        BenchmarkSpec(
            "wemath",
            "WeMath",
            "WeMath",
            1740,
            "wemath",
            table=2,
            headline="score_strict",
            split="testmini",
            source=f"WeMath.tsv from {_LMU}; GitHub We-Math/We-Math",
        ),
        BenchmarkSpec(
            "tasks",
            "Task JSONL",
            "",
            0,
            "tasks",
            table=0,
            split="as given",
            source="a tasks.jsonl from `codedance data import codedance-rl` or "
            "`codedance world gen`",
        ),
    )
}

PAPER_SET = (
    "countbench",
    "pixmocount",
    "vstar",
    "hrbench4k",
    "hrbench8k",
    "chartqa",
    "charxiv",
    "mathvision",
    "mathvista",
    "mathverse",
    "wemath",
)


def get_spec(name: str) -> BenchmarkSpec:
    """The spec for a short name; an unknown name lists the known ones."""
    key = name.strip().lower().replace("-", "_").replace(" ", "")
    if key not in BENCHMARKS:
        raise SettingsError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[key]


def parse_benchmarks(text: str) -> tuple[BenchmarkSpec, ...]:
    """``"vstar,chartqa"`` (or ``"paper"`` for the paper's eleven) as specs, in order.

    >>> [s.name for s in parse_benchmarks("vstar, chartqa")]
    ['vstar', 'chartqa']
    """
    names = [n for n in (p.strip() for p in text.split(",")) if n]
    if names == ["paper"] or names == ["all"]:
        names = (
            list(PAPER_SET) if names == ["paper"] else [n for n, s in BENCHMARKS.items() if s.table]
        )
    if not names:
        raise SettingsError("no benchmarks given")
    return tuple(get_spec(n) for n in dict.fromkeys(names))


@dataclass(frozen=True)
class SampleScore:
    """The score of one sample (one trajectory).

    ``correct`` is None when the official metric cannot be produced without a judge (the
    sample then says so in ``pending``: the step that needs a judge). ``rule_correct`` is the
    rule-only verdict (a lower bound where a judge would extract answers). ``answer`` is the
    graded extracted answer and ``source`` where it was found (``answer_tag``, ``boxed``, ...).
    ``extras`` carry benchmark-specific values as string pairs (the letter WeMath read, the
    extracted answer a judge returned, CharXiv's judge score, ...). ``trajectory_digest`` ties the
    score to the trajectory record it graded (a re-run sample is scored again). ``scoring`` is the
    mode (``vlmevalkit`` or ``strict``); ``judge_failure`` says why the judge's replies gave no
    verdict (the sample then scores 0). ``correct`` is a fraction for CharXiv's 0.5.
    """

    key: str
    benchmark: str
    task_id: str
    correct: bool | float | None
    rule_correct: bool
    answer: str | None
    source: str
    scorer: str
    pending: str = ""
    extras: tuple[tuple[str, str], ...] = ()
    trajectory_digest: str = ""
    scoring: str = "vlmevalkit"
    judge_failure: str = ""

    @property
    def value(self) -> float | None:
        """The verdict as a number in [0, 1] (None while pending)."""
        return None if self.correct is None else float(self.correct)
