"""Sandbox benchmark: codedance's sandbox against three baselines, measured in the same run.

    .venv/bin/python benchmarks/sandbox_bench.py            # full run
    .venv/bin/python benchmarks/sandbox_bench.py --quick    # smaller counts, no 2048 run
    .venv/bin/python benchmarks/sandbox_bench.py --quick --service-only   # local vs through the
    service .venv/bin/python benchmarks/sandbox_bench.py --ordinary-user codedance-test-user  # and
    as that user

Baselines (implemented here):
- ``fresh``: a new ``python`` process per call that imports the imaging libraries and runs the
  snippet (SandboxFusion-style, without replaying history);
- ``exec``: one persistent worker process that ``exec``s every snippet in a shared namespace
  with no isolation at all (the authors' release, Thyme);
- ``jupyter``: an IPython kernel driven through jupyter_client (e2b, CodeAct, OpenHands).

Figures: per-step latency p50/p99 for a trivial snippet, both *paced* (25 ms idle before each
step, as a model's turn leaves between tool calls in a rollout: codedance's next step process is
then forked and prepared before the code arrives) and *back to back* (no pause: that fork, ~2 ms
for the ~50 MB of anonymous memory the preloaded imaging libraries leave, is on the path), and
for crop + draw + save on a 1024² image; a failed step (with rollback where the design has one),
and one that rewrote a committed file first (codedance restores it; the others keep the change);
instance creation time; idle memory per live trajectory (PSS and USS from
/proc/<pid>/smaps_rollup); CPU time per image step (all processes, from a cpuacct cgroup);
throughput at 1, 2, 8 and 64 concurrent trajectories; and 2048 live trajectories held at once
(memory, and none lost). Ratios are printed against the
baselines. ``service``: every figure again through ``codedance sandbox serve`` (a server process
on a Unix socket, `Sandbox(url=...)` and `SandboxPool(url=...)`), its trivial steps taking turns
with the local ones, the 2048 trajectories held by one service, and the controller's CPU per
step (client and server); printed next to local with the difference and the ratio.
``--ordinary-user USER``: the table again as that user (a controller without root: private
views, no cgroups), printed next to root's. The trivial steps of codedance, ``exec``, Jupyter and
the service are measured in rounds that take turns (`measure_trivial`), so that a busy moment on
a shared machine weighs on all alike. Run as root for full isolation (and the CPU figure, which
needs cgroup v1 cpuacct), inside ``unshare --pid --fork --mount-proc``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from codedance.sandbox import Sandbox, SandboxService
from codedance.sandbox.pool import SandboxPool

TRIVIAL = "x = 1"
IMAGE_STEP = textwrap.dedent("""\
    from PIL import ImageDraw
    crop = input_image.crop((256, 256, 768, 768)).resize((1024, 1024))
    ImageDraw.Draw(crop).rectangle((100, 100, 400, 400), outline=(255, 0, 0), width=4)
    crop.save('crop.png')
""")
FAILING = "y = [0] * 1000\nraise ValueError('boom')"
KEPT_FILE = "open('notes.txt', 'w').write('kept')"  # committed before FAILING_REWRITE runs
# codedance restores the file
FAILING_REWRITE = "open('notes.txt', 'w').write('changed')\nraise ValueError('boom')"
ROUNDS = 6  # rounds in which the designs take turns at the trivial step (`measure_trivial`)
MODEL_TURN_S = (
    0.025  # idle time before each "paced" step: a (very fast) model writing its next turn
)
PRELUDE = ("import numpy, cv2, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot\n"
           "from PIL import Image\ninput_image = Image.open('input_image.jpg')\n")  # fmt: skip


def test_image() -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (1024, 1024, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def memory_of(pid: int) -> tuple[float, float]:
    """(PSS, USS) of one process in MB."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as handle:
        for line in handle:
            parts = line.split()
            if parts and parts[0].rstrip(":") in ("Pss", "Private_Clean", "Private_Dirty"):
                values[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return values.get("Pss", 0.0), values.get("Private_Clean", 0.0) + values.get(
        "Private_Dirty", 0.0
    )


def memory_of_live(pids) -> list[tuple[float, float]]:
    """`memory_of` each of ``pids`` still running (a step's process may exit meanwhile)."""
    readings = []
    for pid in pids:
        try:
            readings.append(memory_of(pid))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return readings


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:  # it exited meanwhile
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as handle:
                    children = [int(c) for c in handle.read().split()]
            except OSError:
                continue
            found += children
            frontier += children
    return found


def trajectory_memory(sb) -> tuple[float, float]:
    """(PSS, USS) in MB of one trajectory: its holder plus the idle spare step process it forks."""
    pids = [sb._holder_pid, *descendants(sb._holder_pid)]
    readings = [memory_of(pid) for pid in pids]
    return sum(r[0] for r in readings), sum(r[1] for r in readings)


class CpuMeter:
    """CPU time of a set of process trees, through a cgroup v1 cpuacct group (None if absent)."""

    def __init__(self, name: str):
        import tempfile

        try:  # a group of its own (a pid namespace's pids repeat): None where none can be made
            self.path = tempfile.mkdtemp(
                prefix=f"codedance-bench-{name}-", dir="/sys/fs/cgroup/cpuacct"
            )
        except OSError:
            self.path = None

    def add(self, pid: int) -> None:
        """Add ``pid`` and every process already below it (children forked later follow)."""
        if not self.path:
            return
        for member in [pid, *descendants(pid)]:
            try:
                with open(os.path.join(self.path, "cgroup.procs"), "w") as handle:
                    handle.write(str(member))
            except OSError:
                pass

    def seconds(self) -> float | None:
        if not self.path:
            return None
        with open(os.path.join(self.path, "cpuacct.usage")) as handle:
            return int(handle.read()) / 1e9

    def close(self) -> None:
        if self.path:
            try:
                os.rmdir(self.path)
            except OSError:
                pass


# ------------------------------------------------------------------ baselines
class ExecWorker:
    """The authors' design: one long-lived process exec'ing snippets, no isolation."""

    SERVER = textwrap.dedent("""\
        import sys, json, io, contextlib, traceback, os
        os.chdir(sys.argv[1])
        ns = {}
        exec(sys.argv[2], ns)
        for line in sys.stdin:
            code = json.loads(line)
            out = io.StringIO()
            ok = True
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, ns)
            except Exception:
                ok = False
                ns.clear(); exec(sys.argv[2], ns)  # the release wipes the namespace after an error
            sys.__stdout__.write(json.dumps([ok, out.getvalue()]) + "\\n"); sys.__stdout__.flush()
    """)

    def __init__(self, workdir: str):
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.SERVER, workdir, PRELUDE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, code: str) -> bool:
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())[0]

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


class FreshProcess:
    def __init__(self, workdir: str):
        self.workdir = workdir

    def run(self, code: str) -> bool:
        done = subprocess.run(
            [sys.executable, "-c", PRELUDE + code],
            cwd=self.workdir,
            check=False,
            capture_output=True,
        )
        return done.returncode == 0

    def close(self) -> None:
        pass


class JupyterKernel:
    def __init__(self, workdir: str):
        from jupyter_client.manager import start_new_kernel

        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=workdir)
        self.run(PRELUDE)

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid

    def run(self, code: str) -> bool:
        reply = self.client.execute_interactive(code, timeout=60, output_hook=lambda _msg: None)
        return reply["content"]["status"] == "ok"

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


# ------------------------------------------------------------------ measurements
def latencies(run, code: str, n: int, pause_s: float = 0.0) -> list[float]:
    """Per-call latency of ``n`` calls; ``pause_s`` idles before each (a model's turn)."""
    times = []
    for _ in range(n):
        if pause_s:
            time.sleep(pause_s)
        started = time.perf_counter()
        run(code)
        times.append((time.perf_counter() - started) * 1000)
    return times


def p(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def create(name, make, image, results):
    """A fresh instance of one design, timed, with one step run to warm it."""
    workdir = _workdir(image)
    started = time.perf_counter()
    instance = make(workdir)
    results[name]["create_ms"] = (time.perf_counter() - started) * 1000
    instance.run(TRIVIAL)
    return instance


def measure_trivial(instances: dict, n: int, results) -> None:
    """Trivial-step latencies, back to back and paced, of every instance in ``ROUNDS`` rounds
    that take turns (each round in another order): the designs are compared under the same
    load on a shared machine, not a minute apart."""
    times = {name: ([], []) for name in instances}
    names = list(instances)
    for round_ in range(ROUNDS):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            back_to_back, paced = times[name]
            back_to_back += latencies(instances[name].run, TRIVIAL, n // ROUNDS)
            paced += latencies(instances[name].run, TRIVIAL, n // ROUNDS, pause_s=MODEL_TURN_S)
    for name, (back_to_back, paced) in times.items():
        results[name].update(
            trivial_p50=p(back_to_back, 0.5),
            trivial_p99=p(back_to_back, 0.99),
            paced_p50=p(paced, 0.5),
            paced_p99=p(paced, 0.99),
        )


def measure_steps(name, instance, n_image, results, cpu_meter=None) -> None:
    """Image-step latencies and CPU, and failed-step latencies, of one instance."""
    cpu_before = (cpu_meter.seconds() if cpu_meter else None, time.process_time())
    image_times = latencies(instance.run, IMAGE_STEP, n_image)
    if cpu_meter and cpu_before[0] is not None:
        used = cpu_meter.seconds() - cpu_before[0] + time.process_time() - cpu_before[1]
        results[name]["cpu_ms_per_image_step"] = used / n_image * 1000
    failed = latencies(instance.run, FAILING, max(5, n_image // 2))
    instance.run(KEPT_FILE)
    rewrote = latencies(instance.run, FAILING_REWRITE, max(5, n_image // 2))
    results[name].update(
        image_p50=p(image_times, 0.5),
        image_p99=p(image_times, 0.99),
        failed_p50=p(failed, 0.5),
        failed_rewrite_p50=p(rewrote, 0.5),
    )


def _workdir(image: bytes) -> str:
    import tempfile

    path = tempfile.mkdtemp(prefix="codedance-bench-")
    with open(os.path.join(path, "input_image.jpg"), "wb") as handle:
        handle.write(image)
    return path


def idle_memory_codedance(service, image, n) -> dict[str, float]:
    """Mean (PSS, USS) of idle holders after a trivial step and after an image step."""
    sandboxes = [Sandbox([image], service=service) for _ in range(n)]
    figures = {}
    for label, code in (("trivial", TRIVIAL), ("image", IMAGE_STEP)):
        for sb in sandboxes:
            sb.run(code)
        readings = [trajectory_memory(sb) for sb in sandboxes]
        figures[f"idle_pss_mb_{label}"] = statistics.mean(r[0] for r in readings)
        figures[f"idle_uss_mb_{label}"] = statistics.mean(r[1] for r in readings)
    for sb in sandboxes:
        sb.close()
    return figures


def idle_memory_service(url, image, n, server_pid) -> dict[str, float]:
    """`idle_memory_codedance` through the service: the trajectories' processes are the ones
    the server's process tree gained when they were created."""
    before = set(descendants(server_pid))
    sandboxes = [Sandbox([image], url=url) for _ in range(n)]
    figures = {}
    for label, code in (("trivial", TRIVIAL), ("image", IMAGE_STEP)):
        for sb in sandboxes:
            sb.run(code)
        readings = memory_of_live(set(descendants(server_pid)) - before)
        figures[f"idle_pss_mb_{label}"] = sum(r[0] for r in readings) / n
        figures[f"idle_uss_mb_{label}"] = sum(r[1] for r in readings) / n
    for sb in sandboxes:
        sb.close()
    return figures


async def throughput(where: dict, image, concurrency: int, steps: int) -> float:
    """Image steps per second of ``concurrency`` trajectories of a pool on ``where``
    (``service=`` a local service, or ``url=`` a sandbox service)."""
    async with SandboxPool(**where, max_running=os.cpu_count()) as pool:
        sandboxes = [await pool.asandbox([image]) for _ in range(concurrency)]
        per = max(1, steps // concurrency)

        async def drive(sb):
            for _ in range(per):
                await sb.arun(IMAGE_STEP)

        started = time.perf_counter()
        await asyncio.gather(*(drive(sb) for sb in sandboxes))
        return per * concurrency / (time.perf_counter() - started)


def throughput_exec(image, concurrency: int, steps: int) -> float:
    workers = [ExecWorker(_workdir(image)) for _ in range(concurrency)]
    per = max(1, steps // concurrency)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda w: [w.run(IMAGE_STEP) for _ in range(per)], workers))
    rate = per * concurrency / (time.perf_counter() - started)
    for worker in workers:
        worker.close()
    return rate


def freeze_cost_ms(service, image, n: int) -> float | None:
    """Median of one freeze + thaw of an idle trajectory (holder and spare): the price every
    commit and every restore pays so that nothing in the jail can race the controller's file
    handling. None where the host has no freezer."""
    with Sandbox([image], service=service) as sb:
        sb.run("x = 1")
        if sb._cgroup is None or not sb._cgroup.can_freeze:
            return None
        times = []
        for _ in range(n):
            started = time.perf_counter()
            sb._cgroup.freeze(time.monotonic() + 5)
            sb._cgroup.thaw()
            times.append((time.perf_counter() - started) * 1000)
        return statistics.median(times)


FORK_FLOOR = textwrap.dedent("""\
    import gc, json, os, select, time
    from codedance.sandbox.jail.hooks import preload
    preload()
    gc.collect(); gc.freeze()
    forks, exits = [], []
    for _ in range(N):
        read, write = os.pipe()
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.write(write, b"r")
            time.sleep(60)
            os._exit(0)
        os.read(read, 1)
        forks.append(time.perf_counter() - started)
        os.close(read); os.close(write)
        time.sleep(0.005)
        pidfd = os.pidfd_open(pid)
        started = time.perf_counter()
        os.kill(pid, 9)
        select.select([pidfd], [], [])
        exits.append(time.perf_counter() - started)
        os.waitpid(pid, 0); os.close(pidfd)
    median = lambda xs: sorted(xs)[len(xs) // 2] * 1000
    print(json.dumps({"fork_ms": median(forks), "exit_ms": median(exits)}))
""")


def fork_floor_ms(n: int) -> dict:
    """The two costs a fork chain adds to every committed step, in a process holding what the
    zygote preloads (numpy, OpenCV, PIL, matplotlib): a ``fork()`` until the child runs Python,
    and the exit of a killed copy (the replaced holder) until its parent could reap it. Back to
    back both fall inside the next step's latency on two cores; paced, the idle time hides them."""
    code = f"N = {n}\n" + FORK_FLOOR
    output = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.join(os.path.dirname(__file__), ".."),
    ).stdout
    return json.loads(output)


def hold_many(make, image, n, pss_per_trajectory, keep_free_mb: float) -> dict:
    """``n`` live trajectories made by ``make(image)``, each stepped once, then each asked for
    its state: memory, and how many lost it. ``pss_per_trajectory(sandboxes)``: their mean PSS.
    Stops early, saying so, rather than leave the machine less than ``keep_free_mb`` available
    (others share it: checked before every creation, since memory can go fast)."""

    def available_mb() -> float:
        with open("/proc/meminfo") as handle:
            info = {line.split(":")[0]: int(line.split()[1]) for line in handle}
        return info["MemAvailable"] / 1024

    before = available_mb()
    started = time.perf_counter()
    sandboxes: list[Sandbox] = []

    def add_one(_):
        if available_mb() < keep_free_mb:
            return None
        sb = make(image)
        sb.run("x = 1; import numpy as np; a = np.zeros(1000)")
        return sb

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for start in range(0, n, 128):
            made = list(pool.map(add_one, range(start, min(n, start + 128))))
            sandboxes += [sb for sb in made if sb is not None]
            if None in made:
                print(f"stopping at {len(sandboxes)} trajectories: under {keep_free_mb / 1024:.1f} "
                      "GiB of memory available", flush=True)  # fmt: skip
                break
    created_s = time.perf_counter() - started
    used = before - available_mb()
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        answers = list(pool.map(lambda sb: sb.run("print(x + 1)").stdout, sandboxes))
    lost = sum(1 for answer in answers if answer != "2\n")
    pss = pss_per_trajectory(sandboxes)
    for sb in sandboxes:
        sb.close()
    return {
        "n": len(sandboxes),
        "seconds_to_create": created_s,
        "system_mb_used": used,
        "mean_holder_pss_mb": pss,
        "lost": lost,
    }


def sampled_pss(sandboxes) -> float:
    """Mean PSS of local trajectories, from every 32nd or so."""
    sample = sandboxes[:: max(1, len(sandboxes) // 64)]
    return sum(trajectory_memory(sb)[0] for sb in sample) / len(sample)


def served_pss(server_pid: int, before: set[int]) -> float:
    """PSS in MB of the processes the server's tree has beyond ``before``."""
    return sum(r[0] for r in memory_of_live(set(descendants(server_pid)) - before))


def start_service(directory: str) -> tuple[subprocess.Popen, str]:
    """``codedance sandbox serve`` on a socket in ``directory``; (its process, its url)."""
    socket_path = os.path.join(directory, "sandbox.sock")
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from codedance.cli import main; main()",
            "sandbox",
            "serve",
            "--socket",
            socket_path,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": root},
    )
    for line in process.stdout:
        if line.startswith("serving sandboxes on "):
            return process, f"unix://{socket_path}"
    raise RuntimeError("codedance sandbox serve did not start")


def controller_cpu_ms(instance, n: int, server_pid: int) -> float:
    """CPU per paced trivial step of this process and the service's server process together
    (the controller's side; the jail's processes are the same either way): less sensitive to a
    busy host than latency."""

    def used() -> float:
        with open(f"/proc/{server_pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return time.process_time() + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = used()
    latencies(instance.run, TRIVIAL, n, pause_s=MODEL_TURN_S)
    return (used() - before) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts; skips the 2048 run")
    parser.add_argument(
        "--trajectories",
        type=int,
        help="live trajectories to hold, locally and through the service, at the end "
        "(default: 2048; 0 with --quick)",
    )
    parser.add_argument(
        "--keep-free-gib",
        type=float,
        default=3.0,
        help="holding trajectories stops before the machine has less memory available (default 3)",
    )
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument(
        "--service-only",
        action="store_true",
        help="only local against through `codedance sandbox serve`",
    )
    parser.add_argument(
        "--no-service", action="store_true", help="no column through `codedance sandbox serve`"
    )
    parser.add_argument(
        "--ordinary-user",
        metavar="USER",
        help="also run the table as this existing ordinary user (needs root: setpriv, mounts) "
        "and print it beside root's",
    )
    args = parser.parse_args()
    if args.ordinary_user and os.geteuid() != 0:
        parser.error("--ordinary-user needs root (it switches to that user with setpriv)")
    if args.ordinary_user:
        import pwd

        try:
            pwd.getpwnam(args.ordinary_user)
        except KeyError:
            parser.error(f"--ordinary-user {args.ordinary_user!r}: no such user (useradd it first)")
    if args.service_only and args.no_service:
        parser.error("--service-only and --no-service exclude each other")
    n_trivial, n_image = (50, 10) if args.quick else (300, 40)
    holding = args.trajectories if args.trajectories is not None else (0 if args.quick else 2048)
    image = test_image()
    results: dict[str, dict] = {
        name: {} for name in ("codedance", "exec", "jupyter", "fresh", "service")
    }

    import tempfile

    service = SandboxService()
    served = url = None
    if not args.no_service:
        served_dir = tempfile.TemporaryDirectory()
        served, url = start_service(served_dir.name)
    if args.service_only:
        instances = {
            "codedance": create(
                "codedance", lambda w: Sandbox([image], service=service), image, results
            ),
            "service": create("service", lambda w: Sandbox([image], url=url), image, results),
        }
        measure_trivial(instances, n_trivial, results)
        for name, instance in instances.items():
            results[name].update(
                image_p50=p(latencies(instance.run, IMAGE_STEP, n_image), 0.5),
                controller_cpu_ms=controller_cpu_ms(instance, n_trivial, served.pid),
            )
            instance.close()
        service.close()
        served.terminate()
        served.wait(60)
        report_service(results)
        return
    cpu = {name: CpuMeter(name) for name in ("codedance", "exec", "service")}
    cpu["codedance"].add(service._process.pid)
    if served:
        cpu["service"].add(served.pid)
    print(service.isolation.describe(), flush=True)
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)

    def make_exec(workdir):
        worker = ExecWorker(workdir)
        cpu["exec"].add(worker.process.pid)
        return worker

    instances = {
        "codedance": create(
            "codedance", lambda w: Sandbox([image], service=service), image, results
        ),
        "exec": create("exec", make_exec, image, results),
        "jupyter": create("jupyter", JupyterKernel, image, results),
    }
    if served:
        instances["service"] = create(
            "service", lambda w: Sandbox([image], url=url), image, results
        )
    measure_trivial(instances, n_trivial, results)
    for name, instance in instances.items():
        measure_steps(name, instance, n_image, results, cpu.get(name))
    if served:
        for name in ("codedance", "service"):
            results[name]["controller_cpu_ms"] = controller_cpu_ms(
                instances[name], n_trivial, served.pid
            )
    for name in ("exec", "jupyter"):
        pid = instances[name].process.pid if name == "exec" else instances[name].pid
        for label in ("trivial", "image"):
            results[name][f"idle_pss_mb_{label}"], results[name][f"idle_uss_mb_{label}"] = (
                memory_of(pid)
            )
    for instance in instances.values():
        instance.close()
    fresh = create("fresh", FreshProcess, image, results)
    measure_trivial({"fresh": fresh}, ROUNDS, results)
    measure_steps("fresh", fresh, 5, results)
    idle_n = 16 if args.quick else 64
    results["codedance"].update(idle_memory_codedance(service, image, idle_n))
    if served:
        results["service"].update(idle_memory_service(url, image, idle_n, served.pid))
    results["codedance"]["freeze_ms"] = freeze_cost_ms(service, image, 50 if args.quick else 300)
    results["codedance"].update(fork_floor_ms(20 if args.quick else 100))

    for concurrency in (1, 2, 8, 64):
        steps = max(concurrency, 40 if args.quick else 160)
        results["codedance"][f"throughput_{concurrency}"] = asyncio.run(
            throughput({"service": service}, image, concurrency, steps)
        )
        results["exec"][f"throughput_{concurrency}"] = throughput_exec(image, concurrency, steps)
        if served:
            results["service"][f"throughput_{concurrency}"] = asyncio.run(
                throughput({"url": url}, image, concurrency, steps)
            )
    for meter in cpu.values():
        meter.close()
    user = None
    if args.ordinary_user:
        try:
            user = run_as_ordinary_user(args.ordinary_user, args.quick)
        except (subprocess.CalledProcessError, OSError) as exc:
            print(
                f"the run as {args.ordinary_user} failed ({exc}); its table is left out", flush=True
            )
    save(args.json, results, user)  # the long run below adds its rows
    if holding:
        results["codedance"]["hold"] = hold_many(
            lambda image: Sandbox([image], service=service),
            image,
            holding,
            sampled_pss,
            args.keep_free_gib * 1024,
        )
        if served:
            before = set(descendants(served.pid))
            results["service"]["hold"] = hold_many(
                lambda image: Sandbox([image], url=url),
                image,
                holding,
                lambda sandboxes: served_pss(served.pid, before) / len(sandboxes),
                args.keep_free_gib * 1024,
            )
    service.close()
    if served:
        served.terminate()
        served.wait(60)
    save(args.json, results, user)  # before the tables: they can be printed again from it
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"({os.cpu_count()} CPUs)")  # fmt: skip
    report(results)
    if served:
        report_service(results)
    if user:
        report_user(results["codedance"], user, args.ordinary_user)


def save(path: str | None, results: dict, user: dict | None) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump({**results, "ordinary_user": user}, handle, indent=2)


def run_as_ordinary_user(user_name: str, quick: bool) -> dict:
    """This benchmark's codedance column as ``user_name``, with the system's ``/usr/bin/python3``
    (the same minor version as this one): the project and this environment's site-packages are
    bound into a directory of the user's own, in a mount and PID namespace of their own, so
    the user needs no access to where they live. Its own table prints as it runs."""
    import pwd
    import shlex
    import shutil
    import sysconfig
    import tempfile

    user = pwd.getpwnam(user_name)
    base = tempfile.mkdtemp(prefix="codedance-bench-user-")
    os.chmod(base, 0o755)
    home = os.path.join(base, "home")
    os.mkdir(home)
    os.chown(home, user.pw_uid, user.pw_gid)
    project = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    paths = sysconfig.get_paths()
    binds = [
        (project, os.path.join(home, "project")),
        (paths["purelib"], os.path.join(home, "site-packages")),
    ]
    if paths["platlib"] != paths["purelib"]:
        binds.append((paths["platlib"], os.path.join(home, "platlib")))
    for _, target in binds:
        os.mkdir(target)
    mounts = " && ".join(f"mount --bind {shlex.quote(a)} {shlex.quote(b)}" for a, b in binds)
    out = os.path.join(home, "figures.json")
    argv = [
        "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
        "env",
        "-i",
        "PATH=/usr/bin:/bin",
        f"HOME={home}",
        "LANG=C.UTF-8",
        "PYTHONDONTWRITEBYTECODE=1",
        f"PYTHONPATH={':'.join(target for _, target in binds)}",
        "/usr/bin/python3",
        "benchmarks/sandbox_bench.py",
        "--no-service",
        "--trajectories",
        "0",
        "--json",
        out,
        *(["--quick"] if quick else []),
    ]
    script = f'{mounts} && cd {shlex.quote(binds[0][1])} && exec "$@"'
    print(f"\n== as the ordinary user {user_name} (uid {user.pw_uid}) ==", flush=True)
    try:
        subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--fork",
                        "--mount-proc", "sh", "-c", script, "sh", *argv], check=True)  # fmt: skip
        with open(out) as handle:
            return json.load(handle)["codedance"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


ROWS = [
    ("trivial step p50, paced (ms)", "paced_p50"),
    ("trivial step p99, paced (ms)", "paced_p99"),
    ("trivial step p50, back to back (ms)", "trivial_p50"),
    ("trivial step p99, back to back (ms)", "trivial_p99"),
    ("image step p50 (ms)", "image_p50"),
    ("image step p99 (ms)", "image_p99"),
    ("failed step p50 (ms)", "failed_p50"),
    ("failed step that rewrote a committed file p50 (ms)", "failed_rewrite_p50"),
    ("create instance (ms)", "create_ms"),
    ("freeze + thaw per commit or restore (ms)", "freeze_ms"),
    ("fork of a preloaded process, until the child runs (ms)", "fork_ms"),
    ("exit of a killed preloaded process (ms)", "exit_ms"),
    ("CPU per image step (ms)", "cpu_ms_per_image_step"),
    ("idle PSS after a trivial step (MB)", "idle_pss_mb_trivial"),
    ("idle USS after a trivial step (MB)", "idle_uss_mb_trivial"),
    ("idle PSS after an image step (MB)", "idle_pss_mb_image"),
    ("idle USS after an image step (MB)", "idle_uss_mb_image"),
] + [(f"image steps/s, {c} concurrent", f"throughput_{c}") for c in (1, 2, 8, 64)]


def hold_line(hold: dict) -> str:
    return (
        f"{hold['n']} live trajectories: created and stepped in {hold['seconds_to_create']:.0f} s, "
        f"{hold['system_mb_used'] / 1024:.2f} GiB of system memory, "
        f"{hold['mean_holder_pss_mb']:.1f} MB PSS "
        f"per trajectory, {hold['lost']} lost"
    )


def report(results: dict) -> None:
    names = ["codedance", "exec", "jupyter", "fresh"]
    print(f"\n| figure | {' | '.join(names)} | codedance / exec | codedance / jupyter |")
    print("|---|" + "---|" * (len(names) + 2))
    for label, key in ROWS:
        values = [results[n].get(key) for n in names]
        cells = [f"{v:.2f}" if isinstance(v, float) else "–" for v in values]
        ratios = [
            f"{values[0] / other:.2f}×"
            if isinstance(values[0], float) and isinstance(other, float) and other
            else "–"
            for other in (values[1], values[2])
        ]
        print(f"| {label} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    hold = results["codedance"].get("hold")
    if hold:
        print("\n" + hold_line(hold))
    c = results["codedance"]
    jupyter = results["jupyter"]
    checks = {
        "trivial step p50, paced, <= 5 ms and below Jupyter's":
            c["paced_p50"] <= 5 and c["paced_p50"] < jupyter["paced_p50"],
        "trivial step p50, back to back, <= 5 ms and below Jupyter's":
            c["trivial_p50"] <= 5 and c["trivial_p50"] < jupyter["trivial_p50"],
        "failed step p50 <= 10 ms, with a committed file to restore or none":
            max(c["failed_p50"], c["failed_rewrite_p50"]) <= 10,
        "CPU per image step <= 1.5x exec's": c.get("cpu_ms_per_image_step") is None
            or c["cpu_ms_per_image_step"] <= 1.5 * results["exec"].get("cpu_ms_per_image_step", 0),
        "idle PSS after a trivial step <= 15 MB (an image step adds the pixels it keeps)":
            c["idle_pss_mb_trivial"] <= 15,
    }  # fmt: skip
    if hold:
        checks["2048 live within 24 GiB, none lost"] = (
            hold["n"] >= 2048 and hold["system_mb_used"] < 24 * 1024 and hold["lost"] == 0
        )
    print(
        f"\nGoals (paced: {MODEL_TURN_S * 1000:.0f} ms idle before each step, as a "
        "model's turn leaves):"
    )
    for goal, met in checks.items():
        print(f"- {goal}: {'met' if met else 'NOT met'}")


def two_columns(title: str, a: dict, b: dict, rows: list[tuple[str, str]]) -> None:
    """A table of two columns measured in this run, with b - a and b / a."""
    print(f"\n| figure | {title} | difference | ratio |\n|---|---|---|---|---|")
    for label, key in rows:
        x, y = a.get(key), b.get(key)
        if not isinstance(x, float) or not isinstance(y, float):
            continue
        ratio = f"{y / x:.2f}×" if x else "–"
        print(f"| {label} | {x:.2f} | {y:.2f} | {y - x:+.2f} | {ratio} |")


SERVICE_ROWS = [
    *ROWS,
    ("controller CPU per paced trivial step, client + service (ms)", "controller_cpu_ms"),
]


def report_service(results: dict) -> None:
    """Local against through the service: every figure both have, the difference and the ratio,
    and the goals. (The freeze, fork and exit rows are the service's own processes: the same.)"""
    local, served = results["codedance"], results["service"]
    two_columns("local | through the service", local, served, SERVICE_ROWS)
    if served.get("hold"):
        print(f"\nthrough the service: {hold_line(served['hold'])}")
    goals = [
        (
            "trivial step p50 (paced and back to back) <= local + 1 ms",
            max(
                served["paced_p50"] - local["paced_p50"],
                served["trivial_p50"] - local["trivial_p50"],
            )
            <= 1,
        ),
        ("image step p50 <= 1.1x local", served["image_p50"] <= 1.1 * local["image_p50"]),
    ]
    if "paced_p50" in results["jupyter"]:
        jupyter = results["jupyter"]
        goals.append(("trivial step p50 (paced and back to back) below Jupyter's",
                      served["paced_p50"] < jupyter["paced_p50"]
                      and served["trivial_p50"] < jupyter["trivial_p50"]))  # fmt: skip
    if served.get("hold"):
        hold = served["hold"]
        goals.append(("2048 live trajectories through one service, none lost",
                      hold["n"] >= 2048 and hold["lost"] == 0))  # fmt: skip
    print("\nGoals through the service:")
    for goal, met in goals:
        print(f"- {goal}: {'met' if met else 'NOT met'}")


def report_user(root: dict, user: dict, user_name: str) -> None:
    """codedance as root against codedance as an ordinary user, both measured in this run."""
    print(f"\ncodedance as root and as the ordinary user {user_name}:")
    two_columns(f"root | {user_name}", root, user, ROWS)


if __name__ == "__main__":
    main()
