"""``--agent``: the protocol is part of a run's settings, checked before anything runs."""

from __future__ import annotations

import pytest

from codedance.config import load
from codedance.errors import SettingsError
from codedance.eval.options import EvalConfig

pytestmark = pytest.mark.tier("unit")


def settings(*overrides: str):
    return load(
        EvalConfig,
        ["server.url=http://m/v1", "out=o", "benchmarks=vstar", *overrides],
        command="eval",
    ).run_settings()


def test_an_unknown_agent_is_a_one_line_error_naming_the_known_ones():
    with pytest.raises(
        SettingsError,
        match="unknown agent 'deepeye'; available: codedance, codedance-paper, deepeyes",
    ):
        settings("agent=deepeye")


def test_the_default_is_codedances_protocol_and_old_runs_still_resume():
    s = settings()
    assert (
        s.agent == "codedance" and s.episode.profile.name == "release" and s.episode.max_turns == 10
    )
    assert "agent" not in s.identity() and s.protocol == "release"


def test_a_peer_protocol_brings_its_own_turn_limit_and_prompt_and_is_part_of_the_identity():
    s = settings("agent=deepeyes")
    assert s.episode.max_turns == 11 and s.episode.profile.name == "deepeyes"
    assert "image_zoom_in_tool" in s.episode.profile.system
    assert s.identity()["agent"] == "deepeyes" and s.protocol == "deepeyes"
    assert settings("agent=codedance-paper").episode.profile.name == "paper"
    assert settings("agent=codedance-paper").protocol == "codedance-paper/paper"


def test_no_tools_is_refused_with_a_peer_protocol():
    with pytest.raises(SettingsError, match="--no-tools is a codedance baseline"):
        settings("agent=deepeyes", "no_tools=true")
