"""The host-wide ``fs.file-max`` is changed only by a service whose owner asked for it, never by
``codedance sandbox check``; a low value is reported with the line that raises it.

Each case runs in a private mount namespace (and a fresh PID namespace, as the check runs
hostile snippets) in which ``/proc/sys/fs/file-max`` is a bind-mounted file of the test's own,
holding a sentinel value: the host's real setting is never read as the one under test, nor
written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from codedance.sandbox.isolation import FILE_MAX, FILE_MAX_RAISED, RAISE_FILE_MAX

SENTINEL = 1_000_003  # no host has it: a script that sees it is looking at the fake
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.tier("integration"),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None,
        reason="a private mount namespace needs root and unshare(1)",
    ),
]

START_SERVICE = f"""
import sys
from codedance.sandbox import SandboxService
assert int(open({FILE_MAX!r}).read()) == {SENTINEL}, 'not the fake fs.file-max: refusing to go on'
option = eval(sys.argv[1])
svc = SandboxService(use_namespaces=False, use_cgroups=False, use_seccomp=False, **option)
print(dict(svc.isolation.missing).get('file table'))
print(svc.isolation.notes)
svc.close()
"""


def _in_private_namespace(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> tuple[str, int]:
    """Run ``command`` where fs.file-max is a fake file holding `SENTINEL`; returns its output and
    what the fake holds afterwards."""
    fake = tmp_path / "file-max"
    fake.write_text(f"{SENTINEL}\n")
    script = f'mount --bind {fake} {FILE_MAX} && exec "$@"'
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            script,
            "sh",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
        check=False,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **env},
    )
    assert "refusing to go on" not in done.stderr, done.stderr
    return done.stdout + done.stderr, int(fake.read_text())


@pytest.mark.parametrize("option,env,raised", [
    ("{}", {}, False),
    ("{'raise_file_max': False}", {RAISE_FILE_MAX: "1"}, False),
    ("{'raise_file_max': True}", {}, True),
    ("{}", {RAISE_FILE_MAX: "1"}, True),
])  # fmt: skip
def test_a_service_raises_fs_file_max_only_when_asked(tmp_path, option, env, raised):
    out, after = _in_private_namespace(tmp_path, [sys.executable, "-c", START_SERVICE, option], env)
    if raised:
        assert after == FILE_MAX_RAISED, out
        assert f"raised the host's fs.file-max from {SENTINEL:,}" in out and "None\n" in out, out
    else:
        assert after == SENTINEL, out
        assert (
            f"fs.file-max is {SENTINEL:,}" in out
            and f"sysctl -w fs.file-max={FILE_MAX_RAISED}" in out
        ), out
        assert "ENFILE" in out and "()" in out, out


def test_sandbox_check_reports_fs_file_max_and_never_changes_it(tmp_path):
    """Even with the opt-in in its environment, the check only says what the value is, what it
    means and what to run; every property still holds."""
    codedance = str(Path(sys.executable).parent / "codedance")
    out, after = _in_private_namespace(
        tmp_path, [codedance, "sandbox", "check"], {RAISE_FILE_MAX: "1"}
    )
    assert after == SENTINEL, out
    assert f"missing file table: fs.file-max is {SENTINEL:,}" in out, out
    assert f"sysctl -w fs.file-max={FILE_MAX_RAISED}" in out, out
    assert "9/9 properties hold" in out, out
