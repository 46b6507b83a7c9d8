"""The sandbox started by an ordinary user (not root), as users on a cluster start it.

Run as root, these tests create the user ``codedance-test-user`` (``useradd``) and run a
controller as that user (``setpriv``) with the system's ``/usr/bin/python3``: the project and the
test environment's site-packages are bind-mounted for it into a fresh directory, in a mount and
PID namespace of the test's own, so it needs no read access to wherever the checkout and the venv
live (under ``/root`` an ordinary user cannot even look). Skipped, saying why, when the tests do
not run as root, when ``/usr/bin/python3`` is another minor version than the test environment's
(compiled packages would not load), or when the user cannot create user namespaces.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("integration")

USER = "codedance-test-user"
PYTHON = "/usr/bin/python3"
PROJECT = Path(__file__).resolve().parents[2]


def _run_as_user(
    user: pwd.struct_passwd,
    home: Path,
    argv: list[str],
    timeout_s: float,
    cgroup_procs: str | None = None,
) -> subprocess.CompletedProcess:
    """``argv`` (after the python) as ``user``, in the project's bound copy, with the test
    environment's site-packages: both bound under ``home`` in a mount and PID namespace of
    its own; with ``cgroup_procs`` (a v2 group's ``cgroup.procs``) moved into that group first,
    by root, as systemd starts a delegated scope's command in it."""
    project, packages = home / "project", home / "site-packages"
    binds = [(str(PROJECT), project), (sysconfig.get_paths()["purelib"], packages)]
    if sysconfig.get_paths()["platlib"] != binds[1][0]:
        binds.append((sysconfig.get_paths()["platlib"], home / "platlib"))
    mounts = " && ".join(
        f"mount --bind {shlex.quote(source)} {shlex.quote(str(target))}" for source, target in binds
    )
    for _, target in binds:
        target.mkdir(exist_ok=True)
    python_path = ":".join(str(target) for _, target in binds)
    env = [
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        f"HOME={home}",
        "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",
        f"PYTHONPATH={python_path}",
    ]
    user_command = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                    *env, PYTHON, *argv]  # fmt: skip
    script = f'{mounts} && cd {shlex.quote(str(project))} && exec "$@"'
    enter = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', cgroup_procs] if cgroup_procs else []
    return subprocess.run(
        [
            *enter,
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
            *user_command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.fixture(scope="module")
def ordinary_user(tmp_path_factory):
    """(the user's passwd entry, a home directory of its own, readable by it alone)."""
    if os.geteuid() != 0:
        pytest.skip(
            "running the sandbox as an ordinary user needs root to create that user (useradd, setpriv)"
        )
    version = (
        subprocess.run(
            [PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if os.path.exists(PYTHON)
        else None
    )
    if version != str(sys.version_info[:2]):
        pytest.skip(
            f"{PYTHON} is {version or 'missing'}, not the test environment's {sys.version_info[:2]}: its "
            "compiled packages would not load"
        )
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            check=True,
        )
        user = pwd.getpwnam(USER)
    base = Path(tempfile.mkdtemp(prefix="codedance-user-"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    namespaces = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                                 "bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "true"],
                                capture_output=True, text=True, check=False)  # fmt: skip
    if namespaces.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(
            f"the ordinary user cannot create user namespaces here: {namespaces.stderr.strip()}"
        )
    yield user, home
    shutil.rmtree(base, ignore_errors=True)


# Run in trajectory A with TARGET a working directory: every way to it A can think of (its path,
# /proc/<pid>/root and cwd of every process A can see, every path any process's mountinfo shows,
# the shared /tmp and /); prints the ways that worked.
ATTACK = """
import json, os
target, secret, inode = TARGET  # the directory, the token in its secret.txt, its inode
name = os.path.basename(os.path.dirname(target))
reached = []
def attempt(how, action):
    try:
        action()
    except OSError:
        return
    reached.append(how)
def read(path):  # succeeds only on the target's own file
    with open(path) as handle:
        if not handle.read().startswith(secret):
            raise PermissionError(path)
def write(path):  # never creates a file: only an existing secret.txt of the target's
    with open(path, "r+") as handle:
        if not handle.read().startswith(secret):
            raise PermissionError(path)
        handle.write("A")
def listing(path):
    if os.stat(path).st_ino != inode:
        raise PermissionError(path)
    os.listdir(path)
def listed_in_work_root():
    if name not in os.listdir(os.path.dirname(os.path.dirname(target))):
        raise FileNotFoundError(name)
attempt("list by path", lambda: listing(target))
attempt("read by path", lambda: read(target + "/secret.txt"))
attempt("write by path", lambda: write(target + "/secret.txt"))
attempt("list the work root", listed_in_work_root)
pids = [p for p in os.listdir("/proc") if p.isdigit()]
for pid in pids:
    attempt(f"/proc/{pid}/root", lambda: read(f"/proc/{pid}/root{target}/secret.txt"))
    attempt(f"/proc/{pid}/cwd", lambda: read(f"/proc/{pid}/cwd/secret.txt"))
    attempt(f"/proc/{pid}/cwd write", lambda: write(f"/proc/{pid}/cwd/secret.txt"))
seen = set()
for pid in pids:
    try:
        with open(f"/proc/{pid}/mountinfo") as handle:
            seen.update(line.split()[4] for line in handle)
    except OSError:
        pass
for path in sorted(seen):
    attempt(f"mountinfo path {path}", lambda: listing(path))
    attempt(f"mountinfo path {path} (read)", lambda: read(path + "/secret.txt"))
    attempt(f"mountinfo path {path} (parent)", lambda: read(os.path.join(path, name, "work", "secret.txt")))
attempt("/tmp left by the neighbour", lambda: open("/tmp/b-was-here").close())
attempt("write /tmp", lambda: open("/tmp/a-was-here", "w").close())
attempt("write /", lambda: open("/a-was-here", "w").close())
print(json.dumps(reached))
"""
FORKS = """
import os, time
children = []
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(1)
            os._exit(0)
        children.append(pid)
except OSError:
    pass
for pid in children:
    os.waitpid(pid, 0)
print(len(children))
"""
# Run by the ordinary user: trajectory A attacks B's working directory, then its own (the
# control: the same attempts must reach it, so they are made at all).
NEIGHBOUR = f"""
import json, os
from codedance.sandbox import Sandbox, SandboxService
from codedance.sandbox.checks import example_image
attack, forks = {ATTACK!r}, {FORKS!r}
service = SandboxService()
out = {{"private_views": service.isolation.private_views, "describe": service.isolation.describe()}}
with Sandbox(service=service) as a, Sandbox(service=service) as b:
    out["b_wrote"] = b.run("open('secret.txt', 'w').write('B-secret')\\ntry:\\n    open('/tmp/b-was-here', 'w')\\n"
                         "except OSError:\\n    pass").ok
    assert a.run("open('secret.txt', 'w').write('A-secret')").ok
    against_b = a.run(attack.replace("TARGET", repr((b.workdir, "B-secret", os.stat(b.workdir).st_ino))))
    against_self = a.run(attack.replace("TARGET", repr((a.workdir, "A-secret", os.stat(a.workdir).st_ino))))
    out["against_b"] = json.loads(against_b.stdout) if against_b.ok else str(against_b)
    out["against_self"] = json.loads(against_self.stdout) if against_self.ok else str(against_self)
    out["b_secret"] = b.run("print(open('secret.txt').read())").stdout.strip()
    out["forks"] = a.run(forks).stdout.strip()
    out["b_forks"] = b.run("import os\\npid = os.fork()\\nif pid == 0: os._exit(0)\\nos.waitpid(pid, 0)").ok
with Sandbox([example_image()], service=service) as c:
    out["input_changed"] = [c.run(code).ok for code in ("import os; os.remove('input_image.jpg')",
                                                        "open(input_image_path, 'ab').write(b'x')",
                                                        "import os; os.rename('input_image.jpg', 'moved.jpg')")]
    out["input_read"] = c.run("print(input_image.size)").stdout.strip()
service.close()
print("RESULT " + json.dumps(out))
"""


def test_a_trajectory_cannot_reach_another_ones_working_directory(ordinary_user):
    user, home = ordinary_user
    done = _run_as_user(user, home, ["-c", NEIGHBOUR], timeout_s=240)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out["private_views"], out["describe"]
    assert out["b_wrote"]
    assert out["against_b"] == [], f"trajectory A reached B's working directory: {out['against_b']}"
    assert out["b_secret"] == "B-secret"
    # the control: the same attempts reach A's own directory by its path, its own cwd and its
    # own mountinfo (none of them writes outside it: /tmp and / stay read-only)
    own = out["against_self"]
    assert {"list by path", "read by path", "write by path", "list the work root"} <= set(own), own
    assert any(how.endswith("/cwd") for how in own) and any(
        how.startswith("mountinfo path") for how in own
    ), own
    assert not {"write /tmp", "write /", "/tmp left by the neighbour"} & set(own), own
    # RLIMIT_NPROC counts per user namespace: 32 processes for the trajectory, holder and spare included
    assert 0 < int(out["forks"]) < 32 and out["b_forks"], out
    # its input image stays as the controller wrote it: not removed, changed or renamed
    assert out["input_changed"] == [False, False, False] and out["input_read"], out


def test_the_contract_suite_holds_for_an_ordinary_user(ordinary_user):
    user, home = ordinary_user
    done = _run_as_user(user, home, ["-m", "pytest", "tests/sandbox/test_contract.py", "-q", "-m", "",
                                     "-p", "no:cacheprovider", "-rs"], timeout_s=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and " 1 skipped" in summary, done.stdout[
        -3000:
    ]  # the owner-locked directory


def test_sandbox_check_exits_0_for_an_ordinary_user_and_reports_the_private_view(ordinary_user):
    user, home = ordinary_user
    code = "import sys; from codedance.cli import main; sys.argv = ['codedance', 'sandbox', 'check', '--json']; main()"
    done = _run_as_user(user, home, ["-c", code], timeout_s=600)
    promises = {}
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if "promise" in record:
            promises[record["promise"]] = record
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (
        promises["private"]["verdict"] == "holds" and promises["private"]["outcome"] == "passed"
    ), promises
    assert promises["who_pays"]["verdict"] == "does not hold", promises


DETECT = """
from codedance.sandbox import cgroups
cgroups._ROOT = FAKE_ROOT
for group in ("/job", "/other"):
    cgroups._own_path = lambda controller, group=group: group  # what /proc/self/cgroup would say
    print(cgroups.delegated_v2_group(), cgroups.detect_layout("codedance-detect")[1])
"""


def test_a_delegated_cgroup_v2_group_is_found_and_used(ordinary_user, tmp_path):
    """A cgroup v2 group whose files the user may write (systemd's Delegate=yes, a Slurm job's
    group) is found and the service's groups are made in it; a group of root's is not, and why
    cgroups are missing says what to do. Laid out in a plain directory (this host may have
    cgroup v1): the kernel's permission checks are real. (On a real cgroup v2 hierarchy:
    tests/sandbox/test_delegated_cgroup.py.)"""
    user, home = ordinary_user
    root = home / "cgroup"
    for group, owner in (("job", user), ("other", None)):
        (root / group).mkdir(parents=True)
        for name in ("cgroup.procs", "cgroup.subtree_control"):
            (root / group / name).touch()
        if owner:
            for path in (
                root / group,
                root / group / "cgroup.procs",
                root / group / "cgroup.subtree_control",
            ):
                os.chown(path, owner.pw_uid, owner.pw_gid)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    done = _run_as_user(
        user, home, ["-c", DETECT.replace("FAKE_ROOT", repr(str(root)))], timeout_s=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    job, other = done.stdout.splitlines()
    assert job == f"{root}/job ", job  # no reason: the layout was made
    assert (root / "job" / "codedance-detect" / "cgroup.subtree_control").exists()
    assert other.startswith("None ") and "not a cgroup v2 group delegated to it" in other, other
