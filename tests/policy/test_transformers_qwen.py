"""`TransformersPolicy` on a tiny randomly initialised Qwen2.5-VL built from a config (no download).

Skipped where torch or transformers is not installed (they come with the ``train`` extra). Images
go through `ImageTextProcessor` (transformers' PIL image processor; the stock one needs
torchvision). The image test builds its conversation with the real loop (`Episode`): a task
image, a scripted code turn, a feedback image from the runner's result.
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from PIL import Image as PILImage

from codedance.policy import Completion, SamplingParams
from codedance.policy.qwen_processor import ImageTextProcessor, vision_token_ids
from codedance.policy.transformers_qwen import TransformersPolicy, chat_template_messages
from codedance.rollout import Episode, EpisodeConfig
from codedance.types import ExecResult, ExecStatus, Image, Message, StopReason, Task

pytestmark = pytest.mark.tier("torch")

TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def tiny_tokenizer():  # type: ignore[no-untyped-def]
    """A byte-level tokenizer with Qwen's special tokens, built in memory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:],
    )
    hf.chat_template = TEMPLATE
    return hf


def tiny_model(tokenizer):  # type: ignore[no-untyped-def]
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in SPECIALS}
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 2048,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 4]},
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 32,
            "fullatt_block_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def tiny() -> tuple[object, object]:
    tokenizer = tiny_tokenizer()
    return tiny_model(tokenizer), tokenizer


CHAT = (Message("system", ("sys",)), Message("user", ("How many?",)))


def test_greedy_turn_keeps_sampled_ids_and_logprobs(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, SamplingParams(max_tokens=6))
    first = policy.complete(CHAT)
    assert 1 <= len(first.token_ids) <= 6 and len(first.logprobs) == len(first.token_ids)
    assert all(lp <= 0.0 for lp in first.logprobs)
    assert first.text == tokenizer.decode(list(first.token_ids), skip_special_tokens=True)
    ended = first.token_ids[-1] == tokenizer.eos_token_id
    assert first.finish_reason == ("stop" if ended else "length")
    rendered = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": [{"type": "text", "text": "sys"}]},
            {"role": "user", "content": [{"type": "text", "text": "How many?"}]},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert tokenizer.decode(list(first.prompt_token_ids)) == rendered
    assert policy.complete(CHAT) == first  # greedy is deterministic


def test_a_continued_last_message_is_rendered_open(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, SamplingParams(max_tokens=2))
    open_turn = Message("assistant", ("<code>x</code><sandbox_output>1</sandbox_output>",), True)
    completion = policy.complete((*CHAT, open_turn))
    prompt = tokenizer.decode(list(completion.prompt_token_ids))
    assert prompt.endswith(
        "<|im_start|>assistant\n<code>x</code><sandbox_output>1</sandbox_output>"
    )


async def test_sampling_with_seed_is_reproducible_and_async(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    policy = TransformersPolicy(
        model, tokenizer, SamplingParams(temperature=1.0, max_tokens=8, seed=7)
    )
    a = await policy.acomplete(CHAT)
    b = await policy.acomplete(CHAT)
    assert a.token_ids == b.token_ids and len(a.token_ids) >= 1


def test_images_become_placeholders_in_order() -> None:
    image = Image(png=b"", origin="input:0")
    chat, images = chat_template_messages((Message("user", (image, "q")),))
    assert chat == [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "q"}]}
    ] and images == [image]


def test_importing_the_rollout_does_not_import_torch() -> None:
    import subprocess

    code = "import codedance.rollout, codedance.runs.batch, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


CODE = "<think>look closer</think>\n<code>\n```python\nprint(1)\n```\n</code>"


def image_episode() -> Episode:
    """The loop after one code turn: task image in the prompt, a feedback image in the last."""
    task_image = Image.from_pil(PILImage.new("RGB", (60, 40), (200, 30, 30)), origin="input:0")
    episode = Episode(Task("t", "How many?", (task_image,), "1"), EpisodeConfig(max_turns=4))
    assert episode.on_completion(Completion(text=CODE)) is not None
    crop = Image.from_pil(PILImage.new("RGB", (30, 30), (10, 200, 10)), origin="turn:0:0")
    episode.on_result(ExecResult(ExecStatus.OK, stdout="1\n", images=(crop,)))
    return episode


def visual(model):  # type: ignore[no-untyped-def]
    return (
        model.model.visual
        if hasattr(model, "model") and hasattr(model.model, "visual")
        else model.visual
    )


def test_images_reach_the_model_through_the_pil_processor(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    processor = ImageTextProcessor(tokenizer, max_pixels=56 * 56)
    policy = TransformersPolicy(model, processor, SamplingParams(max_tokens=5))
    episode = image_episode()
    images = [p for m in episode.messages for p in m.parts if isinstance(p, Image)]
    assert [i.origin for i in images] == ["input:0", "turn:0:0"]
    grids = []

    def seen(module, args, kwargs, out):  # type: ignore[no-untyped-def]
        grids.append(kwargs.get("grid_thw", args[1] if len(args) > 1 else None))

    hook = visual(model).register_forward_hook(seen, with_kwargs=True)
    try:
        reply = policy.complete(episode.messages)
    finally:
        hook.remove()
    expected = processor.pixel_inputs(images)["image_grid_thw"]
    assert len(grids) == 1 and torch.equal(
        grids[0], expected
    )  # both images encoded, at prefill only
    prompt = list(reply.prompt_token_ids)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    per_image = [processor.image_tokens(i) for i in images]
    assert all(n >= 1 for n in per_image) and prompt.count(pad) == sum(per_image)
    assert prompt.count(tokenizer.convert_tokens_to_ids("<|vision_start|>")) == 2
    assert "<tool_response>" in tokenizer.decode(prompt)  # the feedback message is in the prompt
    assert 1 <= len(reply.token_ids) <= 5 and len(reply.logprobs) == len(reply.token_ids)
    assert all(-1e9 < lp <= 0.0 for lp in reply.logprobs)
    assert not set(reply.token_ids) & set(vision_token_ids(tokenizer))
    assert policy.complete(episode.messages) == reply  # greedy, images included, is deterministic
    episode.on_completion(reply)
    trajectory = episode.trajectory()
    cut = reply.finish_reason == "length"
    assert trajectory.stop_reason == (
        StopReason.MAX_TOKENS if cut else StopReason.FORMAT_ERROR
    )  # no code from a random model
    assert (
        trajectory.turns[-1].token_ids == reply.token_ids
        and trajectory.turns[-1].logprobs == reply.logprobs
    )
    assert len(trajectory.turns[0].feedback_images) == 1


def test_vision_placeholders_are_never_sampled() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    head = model.lm_head
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
    with torch.no_grad():
        biased.weight.copy_(head.weight)
        biased.bias.zero_()
        biased.bias[pad] = 1e4  # <|image_pad|> is now every step's most likely token
    model.lm_head = biased
    processor = ImageTextProcessor(tokenizer, max_pixels=56 * 56)
    messages = image_episode().messages
    chat, images = chat_template_messages(messages)
    inputs = processor(
        text=[processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)],
        images=images,
    )
    with torch.no_grad():
        assert int(model(**inputs).logits[0, -1].argmax()) == pad
    for sampling in (
        SamplingParams(max_tokens=4),
        SamplingParams(temperature=1.0, max_tokens=4, seed=3),
    ):
        reply = TransformersPolicy(model, processor, sampling).complete(messages)
        assert len(reply.token_ids) >= 1 and not set(reply.token_ids) & set(
            vision_token_ids(tokenizer)
        )
    assert set(vision_token_ids(tokenizer)) == {
        tokenizer.convert_tokens_to_ids(t) for t in SPECIALS[3:]
    }


def test_saved_image_text_processor_is_loaded_by_from_pretrained(tiny, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, tokenizer = tiny
    model.save_pretrained(str(tmp_path))
    ImageTextProcessor(tokenizer, max_pixels=56 * 56).save_pretrained(tmp_path)
    policy = TransformersPolicy.from_pretrained(str(tmp_path), SamplingParams(max_tokens=3))
    assert (
        isinstance(policy.processor, ImageTextProcessor) and policy.processor.max_pixels == 56 * 56
    )
    assert len(policy.complete(image_episode().messages).token_ids) >= 1
