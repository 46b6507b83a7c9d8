"""Agent profiles: each open thinking-with-images model's evaluation protocol (`AgentProfile`).

``codedance eval --agent NAME`` runs a benchmark under one of `AGENTS`; ``codedance`` (the
default) is CodeDance's own protocol with the run's prompt profile.
"""

from codedance.agents.base import CODEDANCE, CODEDANCE_PAPER, AgentProfile
from codedance.agents.deepeyes import DEEPEYES
from codedance.agents.deepeyesv2 import DEEPEYESV2
from codedance.agents.mini_o3 import MINI_O3
from codedance.agents.thyme import THYME
from codedance.errors import SettingsError

AGENTS: dict[str, AgentProfile] = {
    a.name: a for a in (CODEDANCE, CODEDANCE_PAPER, DEEPEYES, DEEPEYESV2, THYME, MINI_O3)
}


def get_agent(name: str) -> AgentProfile:
    """The agent profile called ``name``; `SettingsError` listing the known ones otherwise."""
    if name not in AGENTS:
        raise SettingsError(f"unknown agent {name!r}; available: {', '.join(AGENTS)}")
    return AGENTS[name]


__all__ = ["AGENTS", "CODEDANCE", "AgentProfile", "get_agent"]
