"""`encode_trajectory`: the model's tokens at the right places, masks, spans, image expansion."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from dataclasses import replace

from codedance.train.encode import TemplateMismatch, encode_trajectory
from tests.train.helpers import corpus, tiny

pytestmark = pytest.mark.tier("torch")


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    trajectories = corpus()
    _, processor = tiny(trajectories)
    return trajectories, processor


def test_teacher_text_is_trained_and_everything_else_is_not(setup) -> None:  # type: ignore[no-untyped-def]
    trajectories, processor = setup
    tok = processor.tokenizer
    t = trajectories[0]  # code turn (feedback with an image), then the answer
    e = encode_trajectory(t, tok, template=processor, image_tokens=processor.image_tokens)
    assert len(e.turn_spans) == len(t.turns) == 2
    for turn, (a, b) in zip(t.turns, e.turn_spans, strict=True):
        assert tok.decode(list(e.input_ids[a:b])) == turn.text + "<|im_end|>"
        assert set(e.loss_mask[a:b]) == {1}
    assert sum(e.loss_mask) == sum(b - a for a, b in e.turn_spans)
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert len(e.images) == 2 and e.images[1].origin == "turn:0:0"
    assert (
        e.input_ids.count(pad)
        == sum(e.image_token_counts)
        == sum(processor.image_tokens(i) for i in e.images)
    )
    # the prompt part is exactly what the policy's processor produces for the first request
    chat_prompt = processor.apply_chat_template(
        [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": t.prompt[0].text}],
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    first = processor(text=[chat_prompt], images=[t.prompt[0].images[0]])["input_ids"][0].tolist()
    assert list(e.input_ids[: len(first)]) == first


def test_sampled_ids_are_used_verbatim(setup) -> None:  # type: ignore[no-untyped-def]
    trajectories, processor = setup
    t = trajectories[1]
    odd = (5, 6, 7, processor.tokenizer.eos_token_id)  # not what the text would tokenize to
    t2 = replace(t, turns=(replace(t.turns[0], token_ids=odd),))
    e = encode_trajectory(
        t2, processor.tokenizer, template=processor, image_tokens=processor.image_tokens
    )
    a, b = e.turn_spans[0]
    assert e.input_ids[a:b] == odd and e.sampled_ids
    e_text = encode_trajectory(
        t2,
        processor.tokenizer,
        template=processor,
        image_tokens=processor.image_tokens,
        use_sampled_ids=False,
    )
    assert e_text.input_ids[slice(*e_text.turn_spans[0])] != odd and not e_text.sampled_ids


def test_truncation_never_cuts_an_image_in_half(setup) -> None:  # type: ignore[no-untyped-def]
    trajectories, processor = setup
    full = encode_trajectory(
        trajectories[0],
        processor.tokenizer,
        template=processor,
        image_tokens=processor.image_tokens,
    )
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    second = [j for j, x in enumerate(full.input_ids) if x == pad][-1]  # inside the feedback image
    cut = encode_trajectory(
        trajectories[0],
        processor.tokenizer,
        template=processor,
        image_tokens=processor.image_tokens,
        max_length=second,
    )
    assert cut.truncated and len(cut.images) == 1 and len(cut) <= second
    assert cut.input_ids.count(pad) == cut.image_token_counts[0]


def test_a_template_that_rewrites_the_assistant_turn_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    trajectories, processor = setup

    class Stripping:
        def apply_chat_template(self, chat, tokenize=False, add_generation_prompt=False):  # type: ignore[no-untyped-def]
            text = processor.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            return text.replace("<think>", "")

    with pytest.raises(TemplateMismatch):
        encode_trajectory(
            trajectories[0],
            processor.tokenizer,
            template=Stripping(),
            image_tokens=processor.image_tokens,
        )
