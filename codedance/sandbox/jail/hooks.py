"""Inside the jail: what the zygote imports once, and the image-capture points patched into the
imaging libraries (re-installed before each step, so a snippet that replaces them only affects
itself)."""

from __future__ import annotations

import builtins
import io
import os
from typing import ClassVar


class Hooks:
    """Image capture points patched into the imaging libraries, re-installed before each step.

    The patched functions are built once; `install` only puts back what a snippet replaced (a
    step that changes nothing touches nothing: each write would cost the forked step a
    copy-on-write page fault)."""

    collector = None  # the current step's ImageCollector
    _targets: ClassVar[
        list[tuple[object, str, object]]
    ] = []  # (owner, attribute, hook), built once

    @classmethod
    def install(cls) -> None:
        import matplotlib

        if not cls._targets:
            cls._targets = cls._build()
        if matplotlib.get_backend().lower() != "agg":
            matplotlib.use("Agg", force=True)
        for owner, name, hook in cls._targets:
            if getattr(owner, name, None) is not hook:
                setattr(owner, name, hook)

    @classmethod
    def _build(cls) -> list[tuple[object, str, object]]:
        import cv2
        import matplotlib.figure
        import matplotlib.pyplot as plt
        from PIL import Image

        def show(*_args, **_kwargs):
            for number in plt.get_fignums():
                figure = plt.figure(number)
                if cls.collector is not None:
                    cls.collector.add_figure(figure, "plt.show")
            plt.close("all")

        def figure_show(self, *_args, **_kwargs):
            if cls.collector is not None:
                cls.collector.add_figure(self, "Figure.show")
            plt.close(self)

        def pil_show(self, *_args, **_kwargs):
            if cls.collector is not None:
                cls.collector.add_pil(self, "Image.show")

        def cv2_imshow(_window, image):
            if cls.collector is not None:
                cls.collector.add_array(image, "cv2.imshow", bgr=True)

        def no_window(*_args, **_kwargs):
            return -1

        def no_input(*_args, **_kwargs):
            raise RuntimeError("input() is not available in the sandbox: there is no user to ask")

        windows = ("waitKey", "destroyAllWindows", "destroyWindow", "namedWindow", "pollKey")
        return [
            (plt, "show", show),
            (matplotlib.figure.Figure, "show", figure_show),
            (Image.Image, "show", pil_show),
            (cv2, "imshow", cv2_imshow),
            *((cv2, name, no_window) for name in windows),
            (builtins, "input", no_input),
        ]


def preload() -> dict:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import cv2
    import matplotlib
    import matplotlib.pyplot as plt
    import numpy  # noqa: F401
    from PIL import Image, ImageDraw, ImageFont, ImageOps  # noqa: F401

    cv2.setNumThreads(1)
    matplotlib.use("Agg", force=True)
    figure = plt.figure()
    figure.text(0.5, 0.5, "warm-up")
    figure.savefig(
        io.BytesIO(), format="png"
    )  # the font list and text layout loaded now, not per step
    plt.close("all")
    # matplotlib empties this cache of opened fonts in every child of os.fork() (an FT2Font's
    # file is shared across a fork), which cost each holder's start ~0.5 ms while the zygote's
    # warm-up font sat in it: empty here, that clearing is free (each step empties it too,
    # runtime._drop_open_fonts)
    matplotlib.font_manager._get_font.cache_clear()
    Hooks.install()
    from codedance.sandbox.jail import capture, execution, guards  # noqa: F401  (capture, execution: imported once)

    try:
        import pyseccomp  # (imported here once, not in every holder)
    except (ImportError, OSError):
        pass
    else:
        guards.highest_known_syscall(pyseccomp)

    return dict(vars(builtins))
