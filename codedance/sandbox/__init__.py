"""The transactional code sandbox: persistent, jailed, rolled back exactly after any failure.

    from codedance.sandbox import Sandbox
    with Sandbox(images=["chart.png"], timeout_s=15) as sb:
        r = sb.run("print(input_image.size)")

Modules: ``sandbox`` (the per-trajectory controller), ``layout`` (its limits, directories and
holder request), ``protocol`` (the wire format), ``inputs`` (the input images), ``pool`` (many trajectories, bounded
running steps), ``service`` (the jailed zygote), ``runtime`` (the processes in the jail), ``hooks`` (preloading and capture points),
``guards`` (rlimits, uids, seccomp), ``cgroups``, ``procs`` (pidfds), ``files`` (atomic working directories),
``capture`` (output and images), ``execution`` (running a snippet), ``isolation`` (what the host
allows), ``checks`` (the contract checks behind ``codedance sandbox check``).
"""

from codedance.sandbox.isolation import LAYERS, Isolation, SandboxUnavailable
from codedance.sandbox.layout import Limits
from codedance.sandbox.pool import SandboxPool
from codedance.sandbox.sandbox import Sandbox, SandboxClosed
from codedance.sandbox.service import SandboxService, ServiceError

__all__ = ["LAYERS", "Isolation", "Limits", "Sandbox", "SandboxClosed", "SandboxPool",
           "SandboxService", "SandboxUnavailable", "ServiceError"]
