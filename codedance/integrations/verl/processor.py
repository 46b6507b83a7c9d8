"""The Qwen2-VL / Qwen2.5-VL processor for verl where torchvision is missing.

transformers 5.x builds the stock ``Qwen2_5_VLProcessor`` with a video processor that requires
torchvision, and PyPI's torchvision does not import beside a CPU build of torch. verl's
``hf_processor`` swallows that error and returns ``None`` with a warning
(``verl/utils/tokenizer/tokenizer.py:242-246``); the agent loop then fails on the first image.
verl has no seam for the processor (``HFModelConfig.__post_init__`` calls the name
``hf_processor`` imported into ``verl/workers/config/model.py:21``, used at line 162), so
`install` wraps that name:

1. verl's own ``hf_processor`` runs first (with torchvision, as on GPU nodes installed with
   verl's vLLM extra, its stock processor is used unchanged);
2. if it returns ``None`` for a Qwen2-VL / Qwen2.5-VL checkpoint and torchvision is not
   importable, `build_processor` makes the model's processor class with transformers' PIL image
   processor (``Qwen2VLImageProcessorPil``: the same resizing, patching and normalisation, as
   `codedance.policy.qwen_processor` uses for the CPU trainer) and no video processor, and binds
   the model's ``get_rope_index`` to it as verl's ``hf_processor`` does (``tokenizer.py:204-240``);
3. if it is still ``None`` for a model with a vision tower, a one-line error says what to install.

Why not `codedance.policy.qwen_processor.ImageTextProcessor`: verl calls a transformers
``ProcessorMixin`` (chat template with image blocks, ``__call__(text=, images=)``), so the
model's own processor class is the faithful choice. Not handled: videos (no video processor).
"""

from __future__ import annotations

import importlib.util
import types
from typing import Any

QWEN_VL = {
    "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLModel"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2_5_VLModel"),
}


def torchvision_available() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001  (PyPI's CUDA wheel raises RuntimeError beside CPU torch)
        return False
    return True


def _without_video(processor_cls: type) -> type:
    """``processor_cls`` accepting a torchvision-free base video processor (never called: no
    videos); the class keeps its name, which is what verl dispatches on."""

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor":
            return type(argument)
        return processor_cls.check_argument_for_proper_class(self, argument_name, argument)

    return type(
        processor_cls.__name__,
        (processor_cls,),
        {
            "check_argument_for_proper_class": check_argument_for_proper_class,
            "__module__": __name__,
            "__doc__": f"{processor_cls.__name__} without torchvision.",
        },
    )


def build_processor(path: str, **kwargs: Any) -> Any:
    """The Qwen2-VL / Qwen2.5-VL processor of the checkpoint at `path`, without torchvision."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.video_processing_utils import BaseVideoProcessor

    config = AutoConfig.from_pretrained(
        path, trust_remote_code=kwargs.get("trust_remote_code", False)
    )
    if config.model_type not in QWEN_VL:
        raise ValueError(
            f"{path}: no torchvision-free processor for model type {config.model_type!r}"
        )
    processor_name, model_name = QWEN_VL[config.model_type]
    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    processor = _without_video(getattr(transformers, processor_name))(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=BaseVideoProcessor(),
        chat_template=getattr(tokenizer, "chat_template", None),
    )
    processor.config = config
    model_cls = getattr(transformers, model_name)
    processor.get_rope_index = types.MethodType(model_cls.get_rope_index, processor)
    if hasattr(model_cls, "get_vision_position_ids"):
        processor.get_vision_position_ids = types.MethodType(
            model_cls.get_vision_position_ids, processor
        )
    return processor


def _has_vision(path: str, **kwargs: Any) -> tuple[bool, str | None]:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            path, trust_remote_code=kwargs.get("trust_remote_code", False)
        )
    except Exception:  # noqa: BLE001  (not a transformers checkpoint: leave it to verl)
        return False, None
    return hasattr(config, "vision_config"), config.model_type


def wrap(verl_hf_processor):
    """verl's ``hf_processor`` with the fallback of the module docstring."""

    def hf_processor(name_or_path, **kwargs):
        processor = verl_hf_processor(name_or_path, **kwargs)
        if processor is not None:
            return processor
        vision, model_type = _has_vision(name_or_path, **kwargs)
        if not vision:
            return None
        if model_type in QWEN_VL and not torchvision_available():
            return build_processor(name_or_path, **kwargs)
        raise RuntimeError(
            f"{name_or_path}: verl could not build the processor of this vision model "
            f"({model_type}); install torchvision matching your torch (verl's vllm extra "
            "pins it), see docs/verl.md"
        )

    hf_processor.__wrapped__ = verl_hf_processor
    return hf_processor


def install() -> None:
    """Wrap the ``hf_processor`` name verl's model config calls (idempotent)."""
    from verl.workers.config import model as model_config

    if not hasattr(model_config.hf_processor, "__wrapped__"):
        model_config.hf_processor = wrap(model_config.hf_processor)
