"""PixmoCount's URL images (cache, sha256, explicit fetch) and the VLMEvalKit adapter."""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codedance.eval.loaders import load_benchmark
from codedance.eval.sources import DataNotFoundError
from codedance.eval.spec import get_spec
from codedance.integrations.vlmeval_adapter import CodeDanceModel, vlmeval_model_class
from codedance.policy import ScriptedPolicy

pytestmark = pytest.mark.tier("unit")


@pytest.fixture
def image_server(fx):
    body = fx.png()

    class Handler(BaseHTTPRequestHandler):
        hits: list[str] = []  # noqa: RUF012 - shared with the test

        def log_message(self, *a):
            pass

        def do_GET(self):
            Handler.hits.append(self.path)
            data = body if self.path == "/good.png" else b"not the image"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", body, Handler.hits
    server.shutdown()


def test_pixmo_images_fetched_once_checked_and_cached(tmp_path, fx, image_server):
    url, body, hits = image_server
    digest = hashlib.sha256(body).hexdigest()
    fx.jsonl(
        tmp_path / "test.jsonl",
        [
            {"image_url": f"{url}/good.png", "image_sha256": digest, "count": 5, "label": "people"},
            {
                "image_url": f"{url}/rotten.png",
                "image_sha256": hashlib.sha256(b"the original").hexdigest(),
                "count": 3,
                "label": "cars",
            },
        ],
    )
    spec, cache = get_spec("pixmocount"), tmp_path / "cache"
    with pytest.raises(DataNotFoundError, match="--fetch-images"):
        load_benchmark(spec, path=tmp_path / "test.jsonl", pixmo_cache=cache)
    assert hits == []  # nothing downloaded without the flag
    tasks = load_benchmark(spec, path=tmp_path / "test.jsonl", pixmo_cache=cache, fetch_images=True)
    assert [t.answer for t in tasks] == ["5"]  # the rotten URL's bytes fail the sha256 check
    assert tasks[0].question == "How many people are there in the image?"
    hits.clear()
    assert (
        len(
            load_benchmark(spec, path=tmp_path / "test.jsonl", pixmo_cache=cache, fetch_images=True)
        )
        == 1
    )
    assert hits == ["/rotten.png"]  # the good image came from the cache


class _NoCode:
    def run(self, code):
        raise AssertionError("no code expected")

    async def arun(self, code):
        raise AssertionError("no code expected")

    def close(self):
        pass


def test_vlmeval_adapter_generate(tmp_path, fx):
    (tmp_path / "a.png").write_bytes(fx.png())
    policy = ScriptedPolicy(["<think>t</think><answer>B</answer>"])
    model = CodeDanceModel(policy=policy, runner_factory=lambda images: _NoCode())
    out = model.generate(
        [{"type": "image", "value": str(tmp_path / "a.png")}, {"type": "text", "value": "Q?"}],
        "VStarBench",
    )
    assert out == "B"  # the extracted answer (prediction="answer", the default)
    assert "Q?" in policy.seen[0][-1].text and len(policy.seen[0][-1].images) == 1


@pytest.mark.skipif(
    importlib.util.find_spec("vlmeval") is not None, reason="VLMEvalKit is installed"
)
def test_vlmeval_class_without_vlmeval_says_how_to_install():
    with pytest.raises(ImportError, match="VLMEvalKit is not installed"):
        vlmeval_model_class()
