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

import errno
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
    disk_bytes: int | None = None,
    cgroup_procs: str | None = None,
) -> subprocess.CompletedProcess:
    """``argv`` (after the python) as ``user``, in the project's bound copy, with the test
    environment's site-packages: both bound under ``home`` in a mount and PID namespace of
    its own. With ``disk_bytes``, TMPDIR (where the service keeps its directories) is a private
    tmpfs of that size owned by the user: a small disk that a test may fill. With
    ``cgroup_procs`` (a v2 group's ``cgroup.procs``) moved into that group first, by root, as
    systemd starts a delegated scope's command in it."""
    project, packages = home / "project", home / "site-packages"
    binds = [(str(PROJECT), project), (sysconfig.get_paths()["purelib"], packages)]
    if sysconfig.get_paths()["platlib"] != binds[1][0]:
        binds.append((sysconfig.get_paths()["platlib"], home / "platlib"))
    mounts = " && ".join(
        f"mount --bind {shlex.quote(source)} {shlex.quote(str(target))}" for source, target in binds
    )
    for _, target in binds:
        target.mkdir(exist_ok=True)
    disk = []
    if disk_bytes is not None:
        (home / "disk").mkdir(exist_ok=True)
        options = f"size={disk_bytes},uid={user.pw_uid},gid={user.pw_gid},mode=0700"
        mounts += f" && mount -t tmpfs -o {options} disk {shlex.quote(str(home / 'disk'))}"
        disk = [f"TMPDIR={home / 'disk'}"]
    python_path = ":".join(str(target) for _, target in binds)
    env = [
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        f"HOME={home}",
        "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",
        f"PYTHONPATH={python_path}",
        *disk,
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
            "running the sandbox as an ordinary user needs root to create that user "
            "(useradd, setpriv)"
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
            f"{PYTHON} is {version or 'missing'}, not the test environment's "
            f"{sys.version_info[:2]}: its "
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
    namespaces = subprocess.run(
        [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--clear-groups",
            "bwrap",
            "--unshare-user",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "true",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
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
target, secret = TARGET  # the directory, the token in its secret.txt
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
def listing(path):  # the target's own listing (its secret.txt in it), not any directory's
    if "secret.txt" not in os.listdir(path):
        raise PermissionError(path)
    read(path + "/secret.txt")
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
    attempt(f"mountinfo path {path} (parent)", lambda: read(os.path.join(path, name, "work", \
"secret.txt")))
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
    out["b_wrote"] = b.run("open('secret.txt', 'w').write('B-secret')\\ntry:\\n \
   open('/tmp/b-was-here', 'w')\\n"
                         "except OSError:\\n    pass").ok
    assert a.run("open('secret.txt', 'w').write('A-secret')").ok
    against_b = a.run(attack.replace("TARGET", repr((b.workdir, "B-secret"))))
    against_self = a.run(attack.replace("TARGET", repr((a.workdir, "A-secret"))))
    out["against_b"] = json.loads(against_b.stdout) if against_b.ok else str(against_b)
    out["against_self"] = json.loads(against_self.stdout) if against_self.ok else str(against_self)
    out["b_secret"] = b.run("print(open('secret.txt').read())").stdout.strip()
    out["forks"] = a.run(forks).stdout.strip()
    out["b_forks"] = b.run("import os\\npid = os.fork()\\nif pid == 0: \
os._exit(0)\\nos.waitpid(pid, 0)").ok
with Sandbox([example_image()], service=service) as c:
    out["input_changed"] = [c.run(code).ok for code in ("import os; os.remove('input_image.jpg')",
                                                        "open(input_image_path, 'ab').write(b'x')",
                                                        "import os; os.rename('input_image.jpg', \
'moved.jpg')")]
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
    # RLIMIT_NPROC counts per user namespace: 32 processes for the trajectory, holder and spare
    # included
    assert 0 < int(out["forks"]) < 32 and out["b_forks"], out
    # its input image stays as the controller wrote it: not removed, changed or renamed
    assert out["input_changed"] == [False, False, False] and out["input_read"], out


def test_the_contract_suite_holds_for_an_ordinary_user(ordinary_user):
    user, home = ordinary_user
    done = _run_as_user(
        user,
        home,
        [
            "-m",
            "pytest",
            "tests/sandbox/test_contract.py",
            "-q",
            "-m",
            "",
            "-p",
            "no:cacheprovider",
            "-rs",
        ],
        timeout_s=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and " 1 skipped" in summary, done.stdout[
        -3000:
    ]  # the owner-locked directory


def test_sandbox_check_exits_0_for_an_ordinary_user_and_reports_the_private_view(ordinary_user):
    user, home = ordinary_user
    code = (
        "import sys; from codedance.cli import main; sys.argv = ['codedance', 'sandbox', "
        "'check', '--json']; main()"
    )
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


# Run by the ordinary user with a 64 MiB disk (TMPDIR, where the service keeps every trajectory's
# directory and committed copy). A (a 4 MiB working directory) fills what it can while B's step
# commits, then keeps unnamed files open across a commit; then B commits again.
FILLS = """
import json, os, threading, time
from codedance.sandbox import Sandbox, SandboxService
from codedance.sandbox.layout import Limits
FILL = '''
import os, time
written = 0
try:
    while True:
        with open(f'junk{written >> 20}', 'wb') as f:
            f.write(b'x' * (1 << 20))
        written += 1 << 20
except OSError as e:
    print(written, e.errno)
time.sleep(3)
raise RuntimeError('rolled back')
'''
HOLD = '''
import os
kept, held = [], 0
try:
    for i in range(200):
        f = open(f'h{i}', 'wb')
        os.unlink(f'h{i}')
        kept.append(f)
        f.write(b'x' * (1 << 20))
        f.flush()
        held += 1 << 20
except OSError as e:
    pass
print(held)
'''
service = SandboxService()
small = Limits(workdir_bytes=4 << 20, workdir_files=16)
out = {"bound": (4 << 20) + 16 * os.sysconf("SC_PAGE_SIZE")}  # its bytes, each file's last page
with Sandbox(service=service, limits=small) as a, Sandbox(service=service) as b:
    assert b.run("open('state.bin', 'wb').write(b'b' * (1 << 20)); x = 42").ok
    filled = {}
    thread = threading.Thread(target=lambda: filled.update(r=a.run(FILL)))
    thread.start()
    time.sleep(1.5)  # A has filled all it can and sleeps
    during = b.run("open('more.bin', 'wb').write(b'c' * (4 << 20)); y = 1")
    thread.join()
    out["a_filled"] = filled["r"].stdout.split()
    out["b_during"] = [during.ok, during.notes]
    held = a.run(HOLD)
    out["a_held"] = [held.ok, held.stdout.strip()]
    after = b.run("import os; open('last.bin', 'wb').write(b'd' * (4 << 20)); print(x, y, \
sorted(os.listdir('.')))")
    out["b_after"] = [after.ok, after.stdout.strip(), after.notes]
with Sandbox(service=service) as c:
    out["memfd"] = str(c.run("import os; os.memfd_create('m')").error)
    captured = c.run("import ctypes, os; os.write(1, b'at fd 1 '); "
                     "print(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda v: v + 1)(41))")
    out["captured"] = [captured.ok, sorted(captured.stdout.split("\\n"))]
    out["shm"] = c.run("open('/dev/shm/x', 'wb')").ok
service.close()
print("RESULT " + json.dumps(out))
"""


def test_a_trajectory_that_fills_its_space_leaves_its_neighbours_commits_alone(ordinary_user):
    """Each trajectory's working directory is a tmpfs of its own, sized by its limits: a step
    that fills its space, or a holder that keeps unnamed files open, gets ENOSPC at that size
    and never fills the disk where a neighbour's commit copies its files. memfds (memory no
    address-space rlimit sees) are refused where no memory cgroup counts them; the step's
    captured outputs and ctypes callbacks work without them."""
    user, home = ordinary_user
    done = _run_as_user(user, home, ["-c", FILLS], timeout_s=240, disk_bytes=64 << 20)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    written, error = out["a_filled"]
    assert int(error) == errno.ENOSPC and 4 << 20 <= int(written) <= out["bound"], out
    assert out["b_during"] == [True, []], out
    assert out["a_held"][0] and int(out["a_held"][1]) <= out["bound"], out
    assert out["b_after"][:2] == [True, "42 1 ['.tmp', 'last.bin', 'more.bin', 'state.bin']"], out
    assert "Operation not permitted" in out["memfd"], out
    assert out["captured"] == [True, ["42", "at fd 1 "]] and out["shm"] is False, out


# Run by the ordinary user: a trajectory whose patched holder quits as it resumes is lost; the
# controller then holds nothing of its own tmpfs (which its processes' end would otherwise free).
LOST = """
import json, os, time
from codedance.sandbox import Sandbox
PATCH = ("import sys, os\\n_runtime = sys.modules['__main__']\\n_real = _runtime._expect\\n"
         "def _quit_on_resume(reader, op, stale=()):\\n    if op == 'resume':\\n \
       os._exit(0)\\n"
         "    return _real(reader, op, stale)\\n_runtime._expect = _quit_on_resume\\n"
         "open('committed', 'wb').write(b'c' * (1 << 20))")
def held(device):
    found = []
    for name in os.listdir('/proc/self/fd'):
        try:
            if os.stat(f'/proc/self/fd/{name}').st_dev == device:
                found.append(name)
        except OSError:
            pass
    return found
with Sandbox() as sandbox:
    assert sandbox.run(PATCH).ok
    device = int(sandbox.run("import os; print(os.stat('.').st_dev)").stdout)
    before = held(device)
    failed = sandbox.run("raise ValueError('x')")
    lost = sandbox.run("x = 1") if failed.ok is False and 'lost' not in str(failed.notes) else \
failed
    out = {"before": len(before), "after": len(held(device)), "lost": 'lost' in str(lost.notes)}
print("RESULT " + json.dumps(out))
"""


def test_a_lost_trajectorys_own_tmpfs_is_let_go_at_once(ordinary_user):
    """The controller's descriptor of a trajectory's own tmpfs is all that keeps it once the
    trajectory's processes are gone: a lost trajectory's is closed then, not at close()."""
    user, home = ordinary_user
    done = _run_as_user(user, home, ["-c", LOST], timeout_s=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    assert out == {"before": 1, "after": 0, "lost": True}, out
