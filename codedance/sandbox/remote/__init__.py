"""The sandbox service's clients: unprivileged programs use ``codedance sandbox serve``
(`codedance.sandbox.serving`) through the same API (``client``): ``SandboxPool(url=...)``,
``Sandbox(url=...)``, or ``CODEDANCE_SANDBOX_URL`` for code that creates them without a url;
``wire`` is what crosses the wire, shared with the server. A client needs only httpcore and
msgpack. `Sandbox` and `SandboxPool` hand a url to this package; it imports neither.
"""
