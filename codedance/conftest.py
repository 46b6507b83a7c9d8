"""Doctest collection for the package: modules that import verl, TRL or VLMEvalKit at import
time are collected only where those are installed (the ``train`` extra)."""

from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("verl") else ["integrations/verl/*"]
collect_ignore_glob += [] if importlib.util.find_spec("trl") else ["train/sft.py"]
collect_ignore_glob += ["integrations/vlmeval_adapter.py"] if not importlib.util.find_spec("vlmeval") else []
