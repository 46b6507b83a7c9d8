"""A real OpenAI-compatible HTTP server that replays scripted replies (stdlib only).

For tests, the loop benchmark and offline demos: the model's choices are scripted, everything
else (HTTP, JSON, status codes, retries, timeouts) is real. It serves ``POST
/v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1 in a background thread.

A script is a sequence of `ServerReply` (or plain strings), consumed in order across all
requests, or a function from the decoded request body to a reply (for many concurrent
conversations: decide from the messages). A reply can be an error status, a raw non-JSON body,
a delay, a dropped connection, token ids and logprobs. Every request body is kept in ``requests``.
Not an inference server: no tokenization; token ids are whatever the script says.

Shapes follow vLLM 0.32 as recorded against a real server (``shared/data/vllm-recordings``):
every choice has ``stop_reason``, ``token_ids`` and ``logprobs`` (``null`` unless scripted), the
message has vLLM's null fields, the body has ``usage`` (prompt tokens are the scripted prompt ids'
count, else 0), ``prompt_token_ids`` (``null`` unless scripted) and ``system_fingerprint``; a
body asking for both ``continue_final_message`` and ``add_generation_prompt`` is refused (400)
as vLLM's request validation refuses it (vLLM reads an absent ``add_generation_prompt`` as not
set there); logprob entries have ``bytes`` as a list of ints; error bodies carry ``message``,
``type``
(``BadRequestError`` / ``NotFoundError`` / ...), ``param`` and ``code``; an unknown path answers
FastAPI's ``{"detail": "Not Found"}``; ``/v1/models`` entries have ``owned_by`` and
``max_model_len``.

    with ReplayServer(["<think>t</think><answer>4</answer>"]) as server:
        OpenAIChatPolicy(server.url, "m").complete(messages)
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


@dataclass(frozen=True)
class ServerReply:
    """One scripted answer. ``status`` other than 200 sends ``error`` as an OpenAI error body;
    ``raw`` sends those bytes verbatim (for malformed-response tests); ``drop`` closes the
    connection without answering (a server that died mid-request). ``stop_reason`` is vLLM's
    (the stop string or stop token id that ended generation; None at EOS or the length limit)."""

    text: str | None = ""
    status: int = 200
    error: str = ""
    finish_reason: str = "stop"
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_token_ids: tuple[int, ...] = ()
    delay_s: float = 0.0
    raw: bytes | None = None
    retry_after: str | None = None
    stop_reason: str | int | None = None
    drop: bool = False


_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    413: "RequestEntityTooLarge",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """vLLM's error body."""
    kind = _ERROR_TYPES.get(status, "InternalServerError")
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}
    ).encode()


Script = Sequence[ServerReply | str] | Callable[[dict], ServerReply | str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = (
        1024  # socketserver's default backlog of 5 resets connections at concurrency 64
    )


def _completion_body(reply: ServerReply, model: str) -> dict:
    logprobs = None
    if reply.logprobs:
        logprobs = {
            "content": [
                {
                    "token": f"t{i}",
                    "logprob": lp,
                    "bytes": list(f"t{i}".encode()),
                    "top_logprobs": [],
                }
                for i, lp in enumerate(reply.logprobs)
            ]
        }
    message = {
        "role": "assistant",
        "content": reply.text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    choice = {
        "index": 0,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": reply.finish_reason,
        "stop_reason": reply.stop_reason,
        "token_ids": list(reply.token_ids) if reply.token_ids else None,
        "routed_experts": None,
    }
    completion_tokens = len(reply.token_ids)
    usage = {
        "prompt_tokens": len(reply.prompt_token_ids),
        "total_tokens": len(reply.prompt_token_ids) + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    return {
        "id": "chatcmpl-replay",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": "replay",
        "usage": usage,
        "prompt_logprobs": None,
        "prompt_token_ids": list(reply.prompt_token_ids) or None,
    }


class ReplayServer:
    """Serve `script` for `model_names` until `close` (also a context manager)."""

    def __init__(self, script: Script, model_names: tuple[str, ...] = ("scripted",)) -> None:
        self.script = script
        self.model_names = model_names
        self.requests: list[dict] = []
        self._next = 0
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _reply_for(self, body: dict) -> ServerReply:
        with self._lock:
            self.requests.append(body)
            if callable(self.script):
                reply = self.script(body)
            elif self._next < len(self.script):
                reply = self.script[self._next]
                self._next += 1
            else:
                reply = ServerReply(status=500, error="replay script exhausted")
        return ServerReply(text=reply) if isinstance(reply, str) else reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # one reply, no 40 ms delayed-ACK stall

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(
                self, status: int, payload: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                data = [
                    {
                        "id": name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "replay",
                        "root": name,
                        "parent": None,
                        "max_model_len": 32768,
                        "permission": [],
                    }
                    for name in server.model_names
                ]
                self._send(200, json.dumps({"object": "list", "data": data}).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                body = json.loads(raw)
                if body.get("model") not in server.model_names:
                    message = (
                        f"The model `{body.get('model')}` does not exist. "
                        f"Valid aliases: {', '.join(server.model_names)}."
                    )
                    self._send(404, error_body(404, message, "model"))
                    return
                if body.get("continue_final_message") and body.get("add_generation_prompt"):
                    message = (
                        "Cannot set both `continue_final_message` and "
                        "`add_generation_prompt` to True."
                    )
                    self._send(400, error_body(400, message))
                    return
                reply = server._reply_for(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                headers = {"Retry-After": reply.retry_after} if reply.retry_after else None
                if reply.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif reply.raw is not None:
                    self._send(reply.status, reply.raw, headers)
                elif reply.status != 200:
                    self._send(reply.status, error_body(reply.status, reply.error), headers)
                else:
                    self._send(
                        200, json.dumps(_completion_body(reply, body["model"])).encode(), headers
                    )

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
