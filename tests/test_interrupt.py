"""SIGTERM (what ``timeout``, Slurm and Kubernetes send) stops a long command as Ctrl-C does:
finished work kept, sandboxes closed, nothing left in the temporary directory or the cgroup
hierarchies, exit code 130. Each test runs the real ``codedance`` entry point in a subprocess and
signals it mid-run."""

from __future__ import annotations

import base64
import csv
import glob
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from PIL import Image as PILImage

from codedance.policy.replay_server import ReplayServer

pytestmark = pytest.mark.tier("integration")

ROOT = Path(__file__).resolve().parents[1]
ENTRY = [sys.executable, "-c", "from codedance.cli import main; main()"]


def start(args: list[str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "COLUMNS": "120",
    }
    before = _services()
    process = subprocess.Popen(
        [*ENTRY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    _OLDER[process.pid] = before
    return process


# pid -> the services there were before that process started: in a PID namespace (how these
# tests are run) pids are small and another namespace's live service may carry the same one
_OLDER: dict[int, set[str]] = {}


def _services() -> set[str]:
    return set(
        glob.glob(os.path.join(tempfile.gettempdir(), "codedance-*"))
        + glob.glob("/sys/fs/cgroup/*/codedance-*")
        + glob.glob("/sys/fs/cgroup/*/*/codedance-*")
    )


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for_lines(
    process: subprocess.Popen, path: Path, n: int = 1, timeout_s: float = 120
) -> None:
    deadline = time.monotonic() + timeout_s
    while lines(path) < n:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"no record in {path} after {timeout_s} s"
        time.sleep(0.1)


def leftovers(pid: int) -> list[str]:
    """What a sandbox service of controller ``pid`` (started by `start`) would leave: its folders
    and lock in the temporary directory, its cgroups."""
    found = (
        glob.glob(os.path.join(tempfile.gettempdir(), f"codedance-{pid}-*"))
        + glob.glob(f"/sys/fs/cgroup/*/codedance-{pid}-*")
        + glob.glob(f"/sys/fs/cgroup/*/*/codedance-{pid}-*")
    )
    return [path for path in found if path not in _OLDER.get(pid, set())]


def terminate(process: subprocess.Popen) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_sigterm_stops_demo_like_ctrl_c(tmp_path):
    out = tmp_path / "demo"
    process = start(["demo", "--out", str(out), "--tasks", "60", "--rollouts", "2"])
    wait_for_lines(process, out / "trajectories.jsonl")
    assert leftovers(process.pid), "the demo's sandbox service should be running"
    code, err = terminate(process)
    assert code == 130, err
    assert "interrupted: finished work is saved" in err and "Traceback" not in err
    assert 0 < lines(out / "trajectories.jsonl") < 120
    assert leftovers(process.pid) == []


def _vstar_tsv(path: Path, n: int) -> Path:
    buffer = io.BytesIO()
    PILImage.new("RGB", (32, 24), (200, 30, 30)).save(buffer, format="PNG")
    image = base64.b64encode(buffer.getvalue()).decode()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["index", "question", "A", "B", "answer", "category", "image"])
        for i in range(n):
            writer.writerow([i, "Which colour is the square?", "red", "blue", "A", "color", image])
    return path


def test_sigterm_stops_eval_like_ctrl_c(tmp_path):
    def slow(body):
        time.sleep(0.2)
        return "<answer>A</answer>"

    data = _vstar_tsv(tmp_path / "vstar.tsv", 60)
    out = tmp_path / "run"
    with ReplayServer(slow) as server:
        process = start(
            [
                "eval",
                "--model",
                server.url,
                "--benchmarks",
                "vstar",
                "--data",
                f"vstar={data}",
                "--concurrency",
                "2",
                "--out",
                str(out),
            ]
        )
        wait_for_lines(process, out / "trajectories.jsonl", 2)
        code, err = terminate(process)
    assert code == 130, err
    assert "interrupted: finished work is saved" in err and "Traceback" not in err
    assert 2 <= lines(out / "trajectories.jsonl") < 60
    assert leftovers(process.pid) == []


def test_sigterm_stops_solve_which_does_not_claim_to_resume(tmp_path):
    image = tmp_path / "chart.png"
    PILImage.new("RGB", (32, 24), (200, 30, 30)).save(image)
    asked = []

    def slow(body):
        asked.append(1)
        time.sleep(8)
        return "<answer>A</answer>"

    out = tmp_path / "solve"
    with ReplayServer(slow) as server:
        process = start(
            [
                "solve",
                "--model",
                server.url,
                "--image",
                str(image),
                "--question",
                "q",
                "--out",
                str(out),
            ]
        )
        deadline = time.monotonic() + 120
        while not asked:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.1)
        code, err = terminate(process)
    assert code == 130, err
    assert "solve does not resume" in err and "rerun the same command to resume" not in err
    assert leftovers(process.pid) == []


def test_sigterm_stops_data_verify_like_ctrl_c(tmp_path):
    from typer.testing import CliRunner

    from codedance.cli import app
    from tests.data.fixtures import SFT_SCHEMA, SIZE_OK, USER, code, picture, response, write

    slow = code("import time\ntime.sleep(1)\nprint(input_image.size)")
    rows = [
        {
            "messages": [
                {"role": "user", "content": USER},
                {"role": "assistant", "content": slow},
                {"role": "user", "content": response(SIZE_OK)},
                {"role": "assistant", "content": "<answer>64x48</answer>"},
            ],
            "images": [picture(seed=i)],
        }
        for i in range(20)
    ]
    write(rows, SFT_SCHEMA, tmp_path / "train-0.parquet")
    out = tmp_path / "sft"
    assert (
        CliRunner()
        .invoke(
            app,
            [
                "data",
                "import",
                "codedance-sft",
                str(tmp_path / "train-0.parquet"),
                "--out",
                str(out),
            ],
        )
        .exit_code
        == 0
    )
    process = start(["data", "verify", str(out), "--concurrency", "2"])
    wait_for_lines(process, out / "verify.jsonl")
    code_, err = terminate(process)
    assert code_ == 130, err
    assert "interrupted: finished work is saved" in err and "Traceback" not in err
    assert 1 <= lines(out / "verify.jsonl") < 20
    assert leftovers(process.pid) == []


def test_sigterm_stops_synth_like_ctrl_c_and_a_rerun_resumes(tmp_path):
    out = tmp_path / "synth"
    args = ["synth", "--n", "200", "--out", str(out), "--skills", "counting"]
    process = start(args)
    wait_for_lines(
        process, out / "trajectories.jsonl"
    )  # one accepted: the rerun below needs no more
    code, err = terminate(process)
    assert code == 130, err
    assert "Traceback" not in err
    tried = lines(out / "verdicts.jsonl")
    assert 0 < tried < 410  # stopped before its budget of 2·n + 10 tasks
    assert leftovers(process.pid) == []
    again = start(
        [*args[:2], "1", *args[3:]]
    )  # the same run asked for less: resumed, nothing redone
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert lines(out / "verdicts.jsonl") == tried
    assert leftovers(again.pid) == []


def test_sigkill_leaves_only_what_the_next_sandbox_start_sweeps(tmp_path):
    from codedance.sandbox import Sandbox, SandboxService

    out = tmp_path / "demo"
    process = start(["demo", "--out", str(out), "--tasks", "60", "--rollouts", "2"])
    wait_for_lines(process, out / "trajectories.jsonl")
    process.kill()
    process.communicate(timeout=60)
    assert leftovers(process.pid), "a SIGKILL cannot clean up: the service's folders stay"
    # a service of its own: the process's default one may have started (and swept) long before
    service = SandboxService()  # its start sweeps what dead services left, before it returns
    try:
        assert leftovers(process.pid) == []
        with Sandbox(service=service) as sandbox:
            assert sandbox.run("print(1)").ok
    finally:
        service.close()


def test_sigterm_stops_curate_like_ctrl_c_and_a_rerun_resumes(tmp_path):
    delay = {"s": 0.3}  # the first run's servers are slow, so SIGTERM finds items in flight
    weak_asked = []

    def reply(body):
        time.sleep(delay["s"])
        return "<think>look</think>\n<answer>nothing</answer>"

    def weak_reply(body):
        weak_asked.append(1)
        return reply(body)

    with ReplayServer(weak_reply) as weak, ReplayServer(reply) as strong:
        config = tmp_path / "curate.yaml"
        config.write_text(
            f"out: {tmp_path / 'run'}\n"
            "stages: [filter, atomic]\n"  # atomic: the run holds a sandbox service
            "endpoints:\n"
            f"  weak: {{url: {weak.url}, model: scripted, max_in_flight: 2}}\n"
            f"  strong: {{url: {strong.url}, model: scripted, max_in_flight: 2}}\n"
            "sources: [{kind: world, skills: [counting], n: 30, seed: 0}]\n"
            "filter: {k: 2, judge: never}\n"
            "sandboxes: 1\n"
        )
        records = tmp_path / "run" / "filter.jsonl"
        process = start(["curate", "run", str(config)])
        wait_for_lines(process, records, 2)
        assert leftovers(process.pid), "the curate run's sandbox service should be running"
        code, err = terminate(process)
        assert code == 130, err
        assert "interrupted: finished work is saved" in err and "Traceback" not in err
        kept = lines(records)
        assert 2 <= kept < 30
        assert leftovers(process.pid) == []
        delay["s"] = 0.0
        asked = len(weak_asked)
        again = start(["curate", "run", str(config)])
        _, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        assert lines(records) == 30
        assert len(weak_asked) - asked == 2 * (30 - kept)  # k = 2 per item not yet filtered
        assert leftovers(again.pid) == []
