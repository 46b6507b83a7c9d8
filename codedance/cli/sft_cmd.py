"""``codedance sft``: TRL SFT on saved trajectories, or their export for ms-swift.

    codedance sft --data runs/teacher --model runs/tiny-cpu/init --out runs/sft [key=value ...]
    codedance sft --data runs/teacher --model Qwen/Qwen2.5-VL-7B-Instruct \\
        --preset sft-qwen2.5-vl-7b --out runs/sft-7b
    codedance sft --data runs/teacher --export-swift runs/teacher/swift.jsonl

``--data`` is a folder with ``trajectories.jsonl`` + ``images/`` (`codedance.records`: the
batch runner's, the demo's or the pipeline's ``teacher/`` output). Settings are the ``sft.*``
keys of the config (`codedance.train.config.SFTStage`; paper defaults). A model folder saved by
`codedance.train.tiny.save_policy` loads with our PIL-based processor; any other name loads
with transformers' stock processor (needs torchvision for Qwen2.5-VL). Needs the train extra.
"""

from __future__ import annotations

from pathlib import Path

import typer

from codedance.cli.console import make_console, user_errors
from codedance.cli.train_cmd import load_cli_config

app = typer.Typer(
    help="Supervised fine-tuning on CodeDance trajectories (TRL), or export for ms-swift."
)


def _load_model(name: str):  # type: ignore[no-untyped-def]
    if Path(name, "codedance_processor.json").exists():
        from codedance.train.tiny import load_policy

        return load_policy(name)
    from transformers import AutoModelForImageTextToText, AutoProcessor

    return AutoModelForImageTextToText.from_pretrained(
        name, dtype="auto"
    ), AutoProcessor.from_pretrained(name)


@app.command()
@user_errors
def sft(
    overrides: list[str] = typer.Argument(None, help="key=value settings, e.g. sft.lr=1e-4"),
    data: Path = typer.Option(..., help="Folder with trajectories.jsonl and images/"),
    model: str = typer.Option("", help="Model folder or hub name (not needed with --export-swift)"),
    out: Path = typer.Option(Path("runs/sft"), help="Output folder (resumes from its checkpoints)"),
    config: list[str] = typer.Option(
        [], "-c", "--config", metavar="SPEC", help="A preset name or YAML file (repeatable)."
    ),
    preset: str | None = typer.Option(
        None, help="A preset name in codedance/presets/train (the same as -c NAME)."
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the resolved settings and exit."
    ),
    export_swift: Path | None = typer.Option(
        None, help="Write ms-swift JSONL here instead of training"
    ),
    absolute_paths: bool = typer.Option(
        False, help="Export absolute image paths (default: relative to the JSONL file's folder)"
    ),
) -> None:
    from codedance.errors import SettingsError
    from codedance.records import load_trajectories

    console = make_console()
    cfg = load_cli_config(preset, config, overrides)
    if print_config:
        from codedance.config import dump

        console.print(dump(cfg), end="", markup=False, highlight=False)
        return
    trajectories = [t for _, t in load_trajectories(data)]
    if not trajectories:
        raise SettingsError(
            f"no trajectories in {data / 'trajectories.jsonl'}: give --data a folder that "
            "codedance synth, demo or train wrote"
        )
    if export_swift is not None:
        from codedance.sft_records import canonical_record, write_records

        n = write_records(
            (canonical_record(t) for t in trajectories),
            export_swift,
            "swift",
            absolute=absolute_paths,
        )
        where = (
            "absolute"
            if absolute_paths
            else f"relative to {export_swift.parent}: start ms-swift there"
        )
        console.print(
            f"wrote {n} records to {export_swift} (images under {export_swift.parent / 'images'}, "
            f"paths {where})"
        )
        return
    if not model:
        raise SettingsError("--model is required to train (a model folder or a hub id)")
    local = Path(model).expanduser()
    looks_local = (
        model.startswith((".", "/", "~"))
        or model.count("/") > 1
        or local.parent.is_dir()
        and str(local.parent) != "."
    )
    if looks_local and not local.is_dir():  # a typo in a path is not sent to the hub
        raise SettingsError(
            f"--model {model}: no such folder "
            "(and not a hub id such as Qwen/Qwen2.5-VL-7B-Instruct)"
        )
    from transformers.utils import logging as hf_logging

    from codedance.train.sft import run_sft

    hf_logging.disable_progress_bar()  # per-shard bars bury the result line in a log

    net, processor = _load_model(model)
    result = run_sft(
        net,
        processor,
        trajectories,
        cfg.sft,
        out,
        max_length=cfg.rollout.max_length,
        log=console.print,
    )
    first, last = result.losses[0][1], result.losses[-1][1]
    console.print(
        f"sft: {result.steps} steps on {result.sequences} sequences ({result.truncated} cut); "
        f"loss {first:.4f} → {last:.4f}; model in {out / 'final'}"
    )
