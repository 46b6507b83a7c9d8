"""The transactional code sandbox: persistent, jailed, rolled back exactly after any failure.

    from codedance.sandbox import Sandbox
    with Sandbox(images=["chart.png"], timeout_s=15) as sb:
        r = sb.run("print(input_image.size)")

Subpackages: ``jail`` (what runs inside the jail: the zygote, holders and steps; ``python -m
codedance.sandbox.jail.runtime``), ``memory`` (who pays when the service runs out of memory: the
cgroups' memory figures, the arbiter, charged restores), ``serving`` (the sandbox service,
``codedance sandbox serve``), ``remote`` (its clients: ``Sandbox(url=...)``,
``SandboxPool(url=...)``, ``CODEDANCE_SANDBOX_URL``). Modules of the
controller: ``sandbox`` (one trajectory), ``layout`` (its limits, directories and holder request),
``protocol`` (the wire format, shared with the jail), ``inputs`` (the input images), ``pool`` (many
trajectories, bounded running steps), ``service`` (the jailed zygote), ``cgroups``, ``procs``
(pidfds), ``files`` (atomic working directories), ``remover`` (closed sandboxes' directories, off
``close()``), ``isolation`` (what the host allows), ``checks`` (the contract checks behind
``codedance sandbox check``). Layout: README.md beside this file.
"""

import importlib

# where each public name lives; loaded on first use (PEP 562), so that the zygote, which runs
# ``python -m codedance.sandbox.jail.runtime``, imports none of the controller (asyncio, threads'
# executors, cgroups...): every module it holds is anonymous memory that each step's fork copies
# the page tables of, and each at-fork hook a module registers runs in every forked step
_PUBLIC = {
    "LAYERS": "isolation",
    "Isolation": "isolation",
    "SandboxUnavailable": "isolation",
    "Limits": "layout",
    "SandboxPool": "pool",
    "Sandbox": "sandbox",
    "SandboxClosed": "sandbox",
    "SandboxService": "service",
    "ServiceError": "service",
}

__all__ = [
    "LAYERS",
    "Isolation",
    "Limits",
    "Sandbox",
    "SandboxClosed",
    "SandboxPool",
    "SandboxService",
    "SandboxUnavailable",
    "ServiceError",
]


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
