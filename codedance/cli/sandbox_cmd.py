"""``codedance sandbox check`` (the contract checks), ``codedance sandbox run`` (a snippet file
against images, from the shell) and ``codedance sandbox gc`` (what dead services left)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from codedance.cli.console import echo_untrusted, make_console, user_errors
from codedance.errors import SettingsError
from codedance.prompts.vision import image_file
from codedance.rollout import EXEC_TIMEOUT_S

app = typer.Typer(help="The transactional code sandbox.", no_args_is_help=True)


@app.command()
@user_errors
def check(
    image: Path = typer.Option(
        None,
        exists=True,
        dir_okay=False,
        help="Image to give the sandboxes (default: the bundled example).",
    ),
    require: str = typer.Option(
        None,
        help="Refuse to run below this isolation: 'full' or a comma list "
        "of namespaces,users,seccomp,cgroups,rlimits.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON lines."),
) -> None:
    """Check every sandbox property on this host, print the isolation level achieved and which
    promises hold here; exit 1 when a promise this host makes fails its check."""
    from codedance.sandbox import SandboxService
    from codedance.sandbox.checks import check_sandbox
    from codedance.sandbox.isolation import normalize_requirement
    from codedance.sandbox.promises import host_of

    console = make_console(stderr=as_json)
    data = (
        image_file(image) if image else None
    )  # a bad image is the user's file, not a failed property
    normalize_requirement(require)
    service = SandboxService(raise_file_max=False)  # a check reports the host, never changes it
    try:
        service.isolation.require(require)  # SandboxUnavailable: one message, exit 2
    except BaseException:
        service.close()
        raise
    console.print(service.isolation.describe())

    def show(result) -> None:
        if as_json:
            print(json.dumps(result.__dict__), flush=True)
            return
        colour = {"passed": "green", "failed": "red", "skipped": "yellow"}[result.outcome]
        console.print(
            f"[{colour}]{result.outcome:>7}[/{colour}]  {result.number}. {result.name} "
            f"({result.seconds:.1f} s): {result.detail}"
        )

    results = check_sandbox(service=service, image=data, on_result=show)
    host = host_of(service)
    service.close()
    broken = show_promises(console, host, results, as_json)
    passed = sum(r.outcome == "passed" for r in results)
    console.print(
        f"{passed}/{len(results)} properties hold at isolation level "
        f"'{service.isolation.level}'; "
        + (
            f"a promise made on this host failed: {', '.join(broken)}"
            if broken
            else "every promise made on this host held"
        )
    )
    raise typer.Exit(1 if broken else 0)


def show_promises(console, host, results, as_json: bool) -> list[str]:
    """Print each promise's verdict for ``host`` beside its check's outcome; returns the promises
    this host makes (verdict not "does not hold") whose check failed."""
    from codedance.sandbox.promises import verdicts

    outcomes = {r.number: r for r in results}
    broken = []
    if not as_json:
        console.print("promises on this host (docs/sandbox.md has them for every kind of host):")
    for key, name, number, verdict in verdicts(host):
        result = outcomes.get(number)
        failed = result is not None and result.outcome == "failed"
        if failed and verdict.claimed:
            broken.append(name)
        checked = "not checked here" if result is None else f"check {number} {result.outcome}"
        if as_json:
            print(
                json.dumps(
                    {
                        "promise": key,
                        "name": name,
                        "verdict": verdict.state,
                        "why": verdict.why,
                        "check": number,
                        "outcome": result.outcome if result else None,
                        "claimed": verdict.claimed,
                    }
                ),
                flush=True,
            )
            continue
        colour = (
            "red"
            if failed and verdict.claimed
            else ("green" if verdict.state != "does not hold" else "yellow")
        )
        console.print(
            f"  [{colour}]{verdict.state}[/{colour}]: {name} ({checked})"
            + (f": {verdict.why}" if verdict.why else "")
        )
    return broken


@app.command()
@user_errors
def run(
    snippet: Path = typer.Argument(..., help="Python file to run ('-' for standard input)."),
    image: list[Path] = typer.Option(
        [], "--image", "-i", exists=True, dir_okay=False, help="Input image (repeatable)."
    ),
    timeout: float = typer.Option(EXEC_TIMEOUT_S, help="Wall-clock limit in seconds."),
    out: Path = typer.Option(None, help="Directory to save the returned images in."),
) -> None:
    """Run one snippet against images in a fresh sandbox and print what came back."""
    from codedance.sandbox import Sandbox

    try:
        code = sys.stdin.read() if str(snippet) == "-" else snippet.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read the snippet {snippet}: {exc}") from None
    if timeout <= 0:
        raise SettingsError(f"--timeout must be above 0, got {timeout}")
    images = [image_file(p) for p in image]
    with Sandbox(images=images, timeout_s=timeout) as sandbox:
        result = sandbox.run(code)
    typer.echo(
        f"status: {result.status.value} ({result.duration_s * 1000:.0f} ms"
        f"{', rolled back' if result.rolled_back else ''})"
    )
    # what the snippet wrote reaches a terminal with its control characters escaped
    if result.stdout:
        echo_untrusted(result.stdout.rstrip("\n"))
    if result.stderr:
        echo_untrusted(result.stderr.rstrip("\n"), err=True)
    if result.error:
        echo_untrusted(result.error.traceback, err=True)
    for note in result.notes:
        echo_untrusted(f"note: {note}", err=True)
    if out and result.images:
        out.mkdir(parents=True, exist_ok=True)
        for index, returned in enumerate(result.images):
            path = out / f"image_{index}.png"
            path.write_bytes(returned.png)
            echo_untrusted(
                f"image {index}: {returned.width}x{returned.height} from {returned.origin} "
                f"-> {path}"
            )
    elif result.images:
        typer.echo(f"{len(result.images)} image(s) returned (pass --out DIR to save them)")
    raise typer.Exit(0 if result.ok else 1)


@app.command()
@user_errors
def gc() -> None:
    """Remove the directories and cgroups left by sandbox services that died without closing
    (a controller killed with SIGKILL). Live services are never touched: each holds a lock."""
    from codedance.sandbox.leftovers import sweep

    swept = sweep()
    typer.echo(
        f"removed the leftovers of {len(swept)} dead sandbox service(s)"
        + (f": {', '.join(swept)}" if swept else "")
    )


@app.command()
@user_errors
def serve(
    socket_path: Path = typer.Option(
        Path("/run/codedance/sandbox.sock"),
        "--socket",
        help="The Unix socket local clients connect to.",
    ),
    allow_user: list[str] = typer.Option(
        [],
        help="A local user (name or uid) allowed to use the service "
        "(repeatable; root and the service's own user always are).",
    ),
    allow_group: list[str] = typer.Option(
        [], help="A group whose members are allowed (repeatable)."
    ),
    socket_group: str = typer.Option(
        None,
        help="Make the socket file group-owned by this group, mode 0660 "
        "(default: mode 0666; the allow-lists decide who is served).",
    ),
    tcp: str = typer.Option(
        None,
        help="Also listen on TCP at HOST:PORT, for clients on other hosts (needs --token-file).",
    ),
    token_file: Path = typer.Option(
        None,
        exists=True,
        dir_okay=False,
        help="'NAME TOKEN' per line (mode 0600): the bearer tokens TCP clients show.",
    ),
    tls_cert: Path = typer.Option(
        None, exists=True, dir_okay=False, help="Serve TCP over TLS with this certificate."
    ),
    tls_key: Path = typer.Option(
        None, exists=True, dir_okay=False, help="... and this private key."
    ),
    client_sandboxes: int = typer.Option(2048, min=1, help="Live sandboxes one client may hold."),
    client_memory_mib: int = typer.Option(
        None,
        min=1,
        help="Sum of Limits.memory over one client's live sandboxes, in MiB (default: no bound).",
    ),
    client_connections: int = typer.Option(
        None,
        min=1,
        help="Connections one client (a uid, or a TCP address) may hold open "
        "(default: --client-sandboxes + 64, one per step in flight); "
        "all clients together hold at most half the service's descriptors.",
    ),
    client_request_mib: int = typer.Option(
        256, min=1, help="Bodies of one client's requests in flight together, in MiB."
    ),
    max_images_mib: int = typer.Option(
        64, min=1, help="A sandbox's images (one creation request), in MiB."
    ),
    memory_total_mib: int = typer.Option(
        None,
        min=1,
        help="Memory of all trajectories together, in MiB "
        "(default: 85 % of the host's or the container's).",
    ),
    require: str = typer.Option(
        None, help="Refuse to start below this isolation: 'full' or a comma list."
    ),
    ceiling: list[str] = typer.Option(
        [],
        help="Raise the largest Limits a client may ask, as NAME=VALUE "
        "(repeatable, e.g. memory=8589934592; default: Limits' defaults).",
    ),
) -> None:
    """Run the sandbox controller for this host: unprivileged trainers, eval and curate use it with
    CODEDANCE_SANDBOX_URL=unix://SOCKET (or http(s)://HOST:PORT and CODEDANCE_SANDBOX_TOKEN)."""
    import asyncio
    import signal

    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise SettingsError(
            "`sandbox serve` needs aiohttp: pip install 'codedance[serve]'"
        ) from None
    from codedance.sandbox import SandboxService
    from codedance.sandbox.isolation import normalize_requirement
    from codedance.sandbox.remote.wire import limits_from_pairs
    from codedance.sandbox.serving.admission import ConnectionLimits
    from codedance.sandbox.serving.peers import LocalPolicy, Tokens, gid_of, uid_of
    from codedance.sandbox.serving.server import Listen, Quotas, SandboxServer, claim_socket_path
    from codedance.sandbox.serving.server import serve as serve_forever

    normalize_requirement(require)
    policy = LocalPolicy(
        frozenset(uid_of(u) for u in allow_user), frozenset(gid_of(g) for g in allow_group)
    )
    group = gid_of(socket_group) if socket_group else None
    tokens = Tokens.read(token_file) if token_file else None
    host, port = None, 0
    if tcp:
        host, _, port_text = tcp.rpartition(":")
        if not host or not port_text.isdigit():
            raise SettingsError(f"--tcp {tcp!r}: expected HOST:PORT, e.g. 0.0.0.0:8765")
        if tokens is None:
            raise SettingsError(
                "--tcp needs --token-file: TCP clients are known only by their token"
            )
        port = int(port_text)
    if bool(tls_cert) != bool(tls_key):
        raise SettingsError("--tls-cert and --tls-key go together")
    quotas = Quotas(
        sandboxes=client_sandboxes,
        memory=client_memory_mib << 20 if client_memory_mib else None,
        images=max_images_mib << 20,
        request_bytes=client_request_mib << 20,
        ceiling=limits_from_pairs(ceiling),
    )
    listen = Listen(
        str(socket_path),
        0o660 if group is not None else 0o666,
        group,
        host,
        port,
        str(tls_cert) if tls_cert else None,
        str(tls_key) if tls_key else None,
    )
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    claim_socket_path(str(socket_path))  # a live service there: one line, before starting ours
    service = SandboxService(memory_total=memory_total_mib << 20 if memory_total_mib else None)
    try:
        service.isolation.require(require)
        server = SandboxServer(
            service,
            policy=policy,
            tokens=tokens,
            quotas=quotas,
            connections=ConnectionLimits(per_client=client_connections or client_sandboxes + 64),
        )

        async def main() -> None:
            stop = asyncio.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):
                asyncio.get_running_loop().add_signal_handler(signum, stop.set)
            await serve_forever(
                server,
                listen,
                stop,
                on_ready=lambda urls: print(
                    f"{service.isolation.describe()}\nserving sandboxes on {' and '.join(urls)}",
                    flush=True,
                ),
            )

        asyncio.run(main())
    finally:
        service.close()
