"""Run by a Python that has ms-swift (not by pytest): load an ms-swift JSONL export with ms-swift's
own dataset loader and encode every row with its ``qwen2_5_vl`` template over the tiny locally
built Qwen2.5-VL processor (tests/integrations/verl/tiny_qwen.py; no download), then print JSON:
per row the roles and loss flags as loaded, the images loaded, the vision blocks in the encoded
ids and the text of the tokens that carry labels.

    python tests/data/swift_check.py EXPORT.jsonl MODEL_DIR

ms-swift 4.x (`swift.dataset`, `swift.template`, `swift.model`); 3.x kept them under `swift.llm`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tier("integration")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations" / "verl"))
    import tiny_qwen
    from swift.dataset import load_dataset
    from swift.model import get_model_processor
    from swift.template import get_template
    from transformers import Qwen2_5_VLConfig

    export, model_dir = sys.argv[1], sys.argv[2]
    tok, proc = tiny_qwen.build()
    proc.save_pretrained(model_dir)
    text = {
        "hidden_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 128,
        "vocab_size": len(tok),
    }
    vision = {"depth": 1, "hidden_size": 32, "out_hidden_size": 64, "num_heads": 2}
    Qwen2_5_VLConfig(text_config=text, vision_config=vision).save_pretrained(model_dir)
    _, processor = get_model_processor(model_dir, load_model=False, model_type="qwen2_5_vl")
    if not hasattr(processor, "image_processor"):  # AutoProcessor cannot rebuild the tiny subclass
        proc.model_info, proc.model_meta = processor.model_info, processor.model_meta
        processor = proc
    template = get_template(processor, template_type="qwen2_5_vl")
    template.set_mode("train")
    train, _ = load_dataset([export], split_dataset_ratio=0.0, num_proc=1, shuffle=False)
    vision_start = tok.convert_tokens_to_ids("<|vision_start|>")
    rows = []
    for i in range(len(train)):
        row = train[i]
        encoded = template.encode(row)
        ids, labels = encoded["input_ids"], encoded["labels"]
        rows.append(
            {
                "roles": [m["role"] for m in row["messages"]],
                "loss": [m.get("loss") for m in row["messages"]],
                "images": len(row["images"]),
                "vision_blocks": ids.count(vision_start),
                "trained": tok.decode(
                    [t for t, label in zip(ids, labels, strict=True) if label != -100]
                ),
            }
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
