"""Built-in errors a person can cause leave the module that raises them as a `CodeDanceError`
with one line saying what is wrong, so the command line catches that alone
(`tests/test_errors.py::test_the_command_line_converts_no_library_error`)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image as PILImage

from codedance.errors import DataError, SettingsError
from codedance.eval.report import load_report
from codedance.eval.sources import read_export
from codedance.prompts.vision import image_file
from codedance.runs.rundir import RunDir
from codedance.sandbox.isolation import normalize_requirement
from codedance.sandbox.remote.wire import limits_from_pairs
from codedance.sandbox.serving.peers import Tokens, uid_of

pytestmark = pytest.mark.tier("unit")


def test_an_output_folder_that_cannot_be_made_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingsError, match="cannot create the folder"):
        RunDir(tmp_path / "file" / "run", "eval").claim()


def test_an_unreadable_export_or_report_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"id": 1}\n{not json\n')
    with pytest.raises(DataError, match="rows.jsonl: cannot read its records"):
        read_export(tmp_path / "rows.jsonl")
    (tmp_path / "report.json").write_text("{cut")
    with pytest.raises(DataError, match="not a readable report"):
        load_report(tmp_path)


def test_an_image_file_that_is_not_an_image_names_the_option(tmp_path: Path) -> None:
    (tmp_path / "bad.png").write_bytes(b"garbage")
    with pytest.raises(SettingsError, match="--image .*bad.png: not a readable image"):
        image_file(tmp_path / "bad.png")
    with pytest.raises(SettingsError, match="cannot read it"):
        image_file(tmp_path / "missing.png")
    buffer = io.BytesIO()
    PILImage.new("RGB", (4, 3)).save(buffer, format="PNG")
    (tmp_path / "ok.png").write_bytes(buffer.getvalue())
    assert image_file(tmp_path / "ok.png") == buffer.getvalue()


def test_sandbox_service_settings_are_settings_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="unknown isolation layer"):
        normalize_requirement("seccomp,wings")
    with pytest.raises(SettingsError, match="--ceiling 'memory': expected NAME=VALUE"):
        limits_from_pairs(["memory"])
    with pytest.raises(SettingsError, match="--ceiling 'cpus=many'"):
        limits_from_pairs(["cpus=many"])
    with pytest.raises(SettingsError, match="unknown Limits fields"):
        limits_from_pairs(["colour=3"])
    with pytest.raises(SettingsError, match="Limits.processes must be an int >= 1"):
        limits_from_pairs(["processes=0"])
    assert limits_from_pairs(["cpus=2.5", "processes=8"]).cpus == 2.5
    with pytest.raises(SettingsError, match="no such user"):
        uid_of("no-such-user-on-this-host")
    with pytest.raises(SettingsError, match="cannot read it"):
        Tokens.read(tmp_path / "missing-tokens")
