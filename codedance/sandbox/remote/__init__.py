"""The sandbox as a service: ``codedance sandbox serve`` runs the controller once per host
(``server``), and unprivileged programs use it through the same API (``client``):
``SandboxPool(url=...)``, ``Sandbox(url=...)``, or ``CODEDANCE_SANDBOX_URL`` for code that
creates them without a url. ``peers`` says who a client is; ``wire`` what crosses the wire.
The server's modules import aiohttp; a client needs only httpx and msgpack.
"""
