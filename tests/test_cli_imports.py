"""``codedance --help`` and every usage error answer at once: the command line imports no heavy
library (torch, transformers, verl, ray) until a command that needs one runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("unit")

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "verl", "ray", "trl", "pyarrow", "pandas")
PROBE = """
import json, sys
heavy = set(json.loads(sys.argv[2]))
sys.argv = ["codedance", *json.loads(sys.argv[1])]
import codedance.cli
try:
    codedance.cli.main()
except SystemExit:
    pass
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & heavy)))
"""


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--help"],
        ["train", "--help"],
        ["sft", "--help"],
        ["verl", "--help"],
        ["eval", "--help"],
        ["data", "import", "codedance-rl", "--help"],
    ],
)
def test_the_command_line_imports_no_heavy_library_for_help(args):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
