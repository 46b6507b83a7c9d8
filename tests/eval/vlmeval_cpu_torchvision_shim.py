"""Test-venv only (docs/eval.md, VLMEvalKit): let torchvision's Python part import on a CPU torch.

PyPI's torchvision wheels link libtorch_cuda; with torch+cpu their _C fails to load and
torchvision/_meta_registrations.py then dies registering fakes for the undefined ops
torchvision::nms / qnms. Defining those two schemas first lets `import torchvision` finish;
the ops themselves stay unavailable (calling them raises). Installed by a .pth file.
"""

import importlib.abc
import sys

import pytest

pytestmark = pytest.mark.tier("unit")


class _Finder(importlib.abc.MetaPathFinder):
    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" and not _Finder.done:
            _Finder.done = True
            import torch

            lib = torch.library.Library("torchvision", "FRAGMENT")
            try:
                lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:
                pass
            sys.modules["_codedance_tv_shim_lib"] = lib  # keep the fragment alive


sys.meta_path.insert(0, _Finder())
