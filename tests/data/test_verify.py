"""--verify: imported trajectories re-executed turn by turn in the real sandbox (SandboxPool) and
compared with what they recorded; verdicts per row, a summary, resume; the wording reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image as PILImage
from typer.testing import CliRunner

from codedance.cli import app
from codedance.data.ledger import iter_jsonl
from codedance.data.verify import compare, recorded, verify_dir
from codedance.prompts.profiles import RELEASE_REMINDER
from codedance.types import ExecError, ExecResult, ExecStatus, Image
from tests.data.fixtures import SFT_SCHEMA, sft_rows, write

pytestmark = pytest.mark.tier("integration")

FILE = "train-00000-of-00001.parquet"


def test_import_then_verify_in_the_sandbox(tmp_path: Path) -> None:
    rows, expect = sft_rows()
    write(rows, SFT_SCHEMA, tmp_path / FILE)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "data",
            "import",
            "codedance-sft",
            str(tmp_path / FILE),
            "--out",
            str(out),
            "--verify",
            "--concurrency",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "imported" in result.output and "re-execution in the sandbox" in result.output
    verdicts = {r["key"]: r for r in iter_jsonl(out / "verify.jsonl")}
    assert {int(k.split("#")[1]): v["verdict"] for k, v in verdicts.items()} == expect["verify"]
    assert {int(k.split("#")[1]): v["steps"][0]["verdict"] for k, v in verdicts.items()} == expect[
        "steps"
    ]
    diverged = verdicts[f"{FILE}#3"]
    assert (
        diverged["turn"] == 0
        and diverged["detail"] == "stdout: recorded '(10, 10)', here '(64, 48)'"
    )
    assert verdicts[f"{FILE}#2"]["steps"][0]["detail"] == "recorded SyntaxError, here SyntaxError"
    summary = json.loads((out / "verify_summary.json").read_text())
    assert summary["rows"] == {"faithful": 4, "diverged": 1} and summary["divergence"] == {
        "stdout": 1
    }
    again = verify_dir(out)  # resumes: nothing left to run, totals unchanged
    assert again.ran == 0 and again.rows == {"faithful": 4, "diverged": 1}


def _img(color: tuple[int, int, int], size: tuple[int, int] = (20, 10)) -> Image:
    return Image.from_pil(PILImage.new("RGB", size, color))


def test_recorded_wordings_and_comparison() -> None:
    ok = recorded(
        "<tool_response>\nCode execution successful, output:\n 7 "
        f"\n{RELEASE_REMINDER}\n</tool_response>",
        (),
    )
    assert (ok.ok, ok.stdout) == (True, "7")
    failed = recorded(
        "<tool_response>\nOutput before error:\nhalf\n--- Execution Error (TimeoutError) ---\n"
        "Code execution timed out after 15 seconds\n</tool_response>",
        (),
    )
    assert (failed.ok, failed.stdout, failed.error_type) == (False, "half", "TimeoutError")
    assert recorded("Output:\n3", ()).stdout == "3"  # the release's eval wording
    quiet = recorded(
        "<tool_response>\nCode executed successfully. No explicit output or figures produced. "
        "You should use the `print` function to output text. Rewrite the code.\n</tool_response>",
        (),
    )
    assert (quiet.ok, quiet.stdout) == (True, "")
    unknown = recorded("<interpreter>\n42\n</interpreter>", ())
    assert unknown.ok is None and unknown.stdout == "42"

    red, near, blue = _img((200, 0, 0)), _img((203, 0, 0)), _img((0, 0, 200))
    shown = recorded("<tool_response>\nOutput image:\n<image>\n</tool_response>", (red,))
    assert compare(ExecResult(ExecStatus.OK, images=(near,)), shown, 0.02)[0] == "images_equal"
    assert compare(ExecResult(ExecStatus.OK, images=(blue,)), shown, 0.02)[1].startswith(
        "image pixels"
    )
    assert (
        compare(ExecResult(ExecStatus.OK, images=(_img((200, 0, 0), (40, 20)),)), shown, 0.02)[0]
        == "images_equal"
    )
    assert compare(ExecResult(ExecStatus.OK, images=(_img((200, 0, 0), (20, 20)),)), shown, 0.02)[
        1
    ].startswith("image size")
    assert compare(ExecResult(ExecStatus.OK), shown, 0.02)[1] == "image count: recorded 1, here 0"
    raised = ExecResult(ExecStatus.ERROR, error=ExecError("NameError", "name 'x' is not defined"))
    assert compare(raised, ok, 0.02) == (
        "diverged",
        "status: recorded success, here NameError: name 'x' is not defined",
    )
    assert compare(ExecResult(ExecStatus.OK, stdout="42\n"), unknown, 0.02)[0] == "text_equal"
    assert compare(ExecResult(ExecStatus.OK, stdout="41\n"), unknown, 0.02)[0] == "unreadable"
