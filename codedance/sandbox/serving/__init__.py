"""``codedance sandbox serve``: the controller run once per host (``server``, on aiohttp), serving
sandboxes to the clients of `codedance.sandbox.remote` over a Unix socket or TCP; ``peers`` says
who a client is (peer credentials, tokens). It builds on `Sandbox` and speaks
`codedance.sandbox.remote.wire`.
"""
