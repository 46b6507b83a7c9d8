"""The sandbox's contract, as checks anyone can run on their own host (`codedance sandbox check`).

One check per property the sandbox promises (the paper's §6.2 requirements, numbered 1–9 as
``codedance sandbox check`` prints them; docs/sandbox.md describes each). Each check creates its
own sandboxes on the given service, asserts real behaviour, and reports what it saw.
Checks that run hostile code (``os.kill(-1, 9)``, fork bombs, memory bombs) run only when the
jail's PID namespace and the seccomp filter are both in force; otherwise they are reported as
skipped, because on a bare host such code can kill the caller's own processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from codedance.sandbox.sandbox import Sandbox
from codedance.sandbox.service import SandboxService, wait_gone
from codedance.types import ExecStatus


@dataclass(frozen=True)
class CheckResult:
    number: int
    name: str
    outcome: str  # "passed", "failed" or "skipped"
    detail: str
    seconds: float


def example_image() -> bytes:
    """The bundled example image: a bar chart of four values (12, 7, 15, 4)."""
    return resources.files("codedance.assets").joinpath("example.png").read_bytes()


class _Context:
    def __init__(self, service: SandboxService, image: bytes):
        self.service, self.image = service, image

    def sandbox(self, **options) -> Sandbox:
        return Sandbox([self.image], service=self.service, **options)

    @property
    def hostile_allowed(self) -> bool:
        return self.service.isolation.namespaces and self.service.isolation.seccomp


def _expect(result, status: ExecStatus, what: str) -> None:
    if result.status is not status:
        raise AssertionError(f"{what}: expected {status.value}, got {result.status.value} "
                             f"({result.error or result.notes})")  # fmt: skip


def check_private_workdir(ctx: _Context) -> str:
    with ctx.sandbox() as a, ctx.sandbox() as b:
        _expect(a.run("open('secret.txt', 'w').write('a')"), ExecStatus.OK, "write in own workdir")
        other = b.run(f"import os; print(os.listdir({a.workdir!r}))")
        if other.ok:
            raise AssertionError("one sandbox listed another's working directory")
        shadow = a.run("print(open('/etc/shadow').read()[:10])")
        if shadow.ok:
            raise AssertionError("a sandbox read /etc/shadow")
        overwrite = a.run("open(input_image_path, 'wb').write(b'x')")
        if overwrite.ok:
            raise AssertionError("a sandbox overwrote its read-only input image")
    return "own files writable; a neighbour's workdir, /etc/shadow and the input image are not"


def check_persistence(ctx: _Context) -> str:
    with ctx.sandbox() as sb:
        _expect(
            sb.run(
                "import numpy as np, os\nx = 41\ndef inc(v): return v + 1\n"
                "os.makedirs('d', exist_ok=True); os.chdir('d')\nrng = np.random.default_rng(0)"
            ),
            ExecStatus.OK,
            "step 1",
        )
        second = sb.run("print(inc(x), os.path.basename(os.getcwd()), input_image.size)")
        _expect(second, ExecStatus.OK, "step 2")
        if second.stdout.split()[:2] != ["42", "d"]:
            raise AssertionError(f"state did not persist: {second.stdout!r}")
    return "variables, functions, imports and cwd persist across steps"


def check_atomic(ctx: _Context) -> str:
    failures = {
        "error": "raise ValueError('boom')",
        "timeout": "import time\nwhile True: time.sleep(0.01)",
        "crashed": "import os; os._exit(0)",
    }
    if ctx.hostile_allowed:
        failures["oom"] = "b = bytearray(1 << 40)"
    with ctx.sandbox(timeout_s=2) as sb:
        _expect(
            sb.run(
                "x = 1\nimport numpy as np; np.random.seed(7)\nopen('f.txt', 'w').write('good')"
            ),
            ExecStatus.OK,
            "setup",
        )
        for status, failing in failures.items():
            result = sb.run(
                "x = 2\nopen('f.txt', 'w').write('bad')\nopen('new.txt', 'w').write('n')\n"
                "np.random.seed(8)\n" + failing
            )
            _expect(result, ExecStatus(status), f"failing step ({status})")
            if not result.rolled_back:
                raise AssertionError(f"{status}: not marked rolled back")
            after = sb.run("import os\nprint(x, open('f.txt').read(), os.path.exists('new.txt'), "
                           "np.random.randint(1000))")  # fmt: skip
            if after.stdout.split()[:3] != ["1", "good", "False"]:
                raise AssertionError(f"after {status}: state was not rolled back: {after.stdout!r}")
    return f"memory, files and RNG rolled back after: {', '.join(failures)}"


def check_timeout(ctx: _Context) -> str:
    snippets = {
        "sleep": "import time; time.sleep(10**6)",
        "catching": (
            "while True:\n    try:\n        while True: pass\n    except BaseException: pass"
        ),
        "signals": "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):\n"
        "    signal.signal(s, signal.SIG_IGN)\nsignal.alarm(0)\nwhile True: pass",
        "C loop": "import re; re.match(r'(a+)+$', 'a' * 40 + 'b')",
    }
    times = []
    with ctx.sandbox(timeout_s=1.0) as sb:
        for name, code in snippets.items():
            result = sb.run(code)
            _expect(result, ExecStatus.TIMEOUT, name)
            if result.duration_s > 3.0:
                raise AssertionError(
                    f"{name}: timeout took {result.duration_s:.1f} s for a 1 s limit"
                )
            times.append(result.duration_s)
        _expect(sb.run("print('alive')"), ExecStatus.OK, "after the timeouts")
    return (
        "sleep, caught exceptions, ignored signals and a C-level loop all stopped at "
        f"{max(times):.2f} s (limit 1 s)"
    )


def check_output_bounded(ctx: _Context) -> str:
    with ctx.sandbox() as sb:
        result = sb.run("print('x' * 200_000_000)\nimport os; os.write(1, b'direct' * 1000)")
        _expect(result, ExecStatus.OK, "200 MB print")
        if len(result.stdout) > 100_000 or "cut" not in result.stdout:
            raise AssertionError(f"output not bounded/marked: {len(result.stdout)} characters")
    return (
        f"200 MB printed in {result.duration_s:.2f} s came back as {len(result.stdout)} "
        "characters, cut marked"
    )


def check_images(ctx: _Context) -> str:
    code = {
        "plt.show": (
            "import matplotlib.pyplot as plt\nplt.imshow([[[255, 0, 0]]]); "
            "plt.axis('off'); plt.show()"
        ),
        "open figure": (
            "import matplotlib.pyplot as plt\nfig = plt.figure(); fig.add_subplot().plot([1, 2])"
        ),
        "Image.show": "from PIL import Image\nImage.new('RGB', (32, 32), (255, 0, 0)).show()",
        "cv2.imshow": (
            "import numpy as np, cv2\na = np.zeros((32, 32, 3), np.uint8); a[:, :, 2] = "
            "255\ncv2.imshow('w', a)"
        ),
        "saved file": (
            "from PIL import Image\nImage.new('RGB', (32, 32), (255, 0, 0)).save('red.png')"
        ),
        "last expression": "from PIL import Image\nImage.new('RGB', (32, 32), (255, 0, 0))",
    }
    with ctx.sandbox() as sb:
        for name, snippet in code.items():
            result = sb.run(snippet)
            _expect(result, ExecStatus.OK, name)
            if len(result.images) != 1:
                raise AssertionError(f"{name}: expected one image, got {len(result.images)}")
            if name in ("Image.show", "cv2.imshow", "saved file", "last expression"):
                pixel = result.images[0].to_pil().convert("RGB").getpixel((16, 16))
                if pixel != (255, 0, 0):
                    raise AssertionError(f"{name}: red came back as {pixel}")
        many = sb.run(
            "import matplotlib.pyplot as plt\nfor i in range(50): plt.figure().suptitle(str(i))"
        )
        if len(many.images) != sb.limits.max_images or not many.notes:
            raise AssertionError(f"image limit not applied: {len(many.images)} images")
    return (
        "plt.show, open figures, Image.show, cv2.imshow (BGR), saved files and last "
        "expressions each came back once, colours right"
    )


def check_denied(ctx: _Context) -> str:
    attempts = {
        "network": "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)",
        "subprocess": "import subprocess; subprocess.run(['ls'])",
        "os.system": "import os\nif os.system('true') != 0: raise OSError('os.system failed')",
        "signal the controller": "import os; os.kill(os.getppid(), 9)",
        "ptrace": (
            "import ctypes; libc = ctypes.CDLL(None)\nif libc.ptrace(16, 1, 0, 0) != 0: "
            "raise OSError('denied')"
        ),
        "huge file": "open('big', 'wb').write(b'0' * (300 << 20))",
    }
    if ctx.hostile_allowed:
        attempts["memory bomb"] = "x = bytearray(10**11)"
        attempts["kill(-1)"] = "import os; os.kill(-1, 9)"
    with ctx.sandbox() as sb:
        for name, snippet in attempts.items():
            result = sb.run(snippet)
            if result.ok:
                raise AssertionError(f"{name}: the attempt succeeded")
        _expect(sb.run("print('alive')"), ExecStatus.OK, "after the attempts")
    return f"denied, instance still usable: {', '.join(attempts)}"


def check_independent(ctx: _Context) -> str:
    with ctx.sandbox() as calm, ctx.sandbox(timeout_s=2) as wild:
        _expect(calm.run("y = 'kept'"), ExecStatus.OK, "calm setup")
        crash = (
            "import ctypes; ctypes.string_at(0)"
            if ctx.hostile_allowed
            else "import os; os._exit(1)"
        )
        wild.run(crash)
        _expect(calm.run("print(y)"), ExecStatus.OK, "neighbour after a crash")
    return "a neighbour's crash left another instance's state intact"


def check_no_leaks(ctx: _Context) -> str:
    fds_before = len(os.listdir("/proc/self/fd"))
    sb = ctx.sandbox()
    sb.run("open('f', 'w').write('x')")
    pid, workdir = sb._holder_pid, sb.workdir
    sb.close()
    if not wait_gone(pid) or os.path.exists(workdir):
        raise AssertionError("a process or the working directory survived close()")
    if sb._cgroup is not None and any(os.path.exists(d) for d in sb._cgroup.directories()):
        raise AssertionError("the trajectory's cgroup survived close()")
    fds_after = len(os.listdir("/proc/self/fd"))
    if fds_after > fds_before:
        raise AssertionError(f"file descriptors leaked: {fds_before} -> {fds_after}")
    return "after close: no process, cgroup, directory or file descriptor left"


CHECKS: tuple[tuple[int, str, Callable[[_Context], str]], ...] = (
    (1, "private working directory", check_private_workdir),
    (2, "state persists across steps", check_persistence),
    (3, "atomic steps (exact rollback)", check_atomic),
    (4, "undefeatable wall-clock timeout", check_timeout),
    (5, "bounded output", check_output_bounded),
    (6, "image capture", check_images),
    (7, "no network, programs, signals; bounded resources", check_denied),
    (8, "independent instances", check_independent),
    (9, "no leaks after close", check_no_leaks),
)


def check_sandbox(
    service: SandboxService | None = None,
    image: bytes | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run every check; returns their results (``on_result`` sees each as soon as it is done)."""
    own = service is None
    service = service or SandboxService()
    ctx = _Context(service, image or example_image())
    results = []
    try:
        for number, name, check in CHECKS:
            started = time.monotonic()
            try:
                outcome, detail = "passed", check(ctx)
            except AssertionError as exc:
                outcome, detail = "failed", str(exc)
            except Exception as exc:  # noqa: BLE001 - a broken host is a failed check, with why
                outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
            result = CheckResult(number, name, outcome, detail, time.monotonic() - started)
            results.append(result)
            if on_result:
                on_result(result)
    finally:
        if own:
            service.close()
    return results
