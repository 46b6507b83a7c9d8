"""Named reward profiles: every number of the reward and advantage in one frozen record.

- ``paper`` (default): the paper's §3.1 and Appendix 8 as printed (typo corrected, see
  `codedance.rewards.core`). r = R_acc + R_format + R_seq with
  R_seq = (0.5 | 1.0) · d(μ_acc) · N_succ/N_total, d = σ(4(0.5 − μ_acc)) − 0.2, μ_acc the group's
  mean accuracy; turn returns (β 0.2, penalty −0.5) normalized over the batch's call turns
  (``turn_scope="call_turns"``: Appendix 8.1 gives the other turns zero turn-level signal) and
  added to A_seq with weight 1.
- ``paper-all-turns``: ``paper`` with Eq. 2's statistics over every assistant turn of the batch
  (``turn_scope="all_turns"``): a turn that cannot fail sits above the mean, so every call pays
  for the batch's failure rate (docs/rewards.md, "Which turns R_turn is normalized over").
- ``release``: the authors' code: prefactors (0.5, 1.5) general / (1.0, 2.0) math, the tanh form
  (an effective γ of 8), μ = group mean of the *score* (accuracy + format penalty), R_seq inside the
  GRPO reward, and A = GRPO(score + d·tool) + 0.2·Â_turn where Â_turn is normalized over the call
  turns only, the answer turn and non-call turns get 0, and a constant batch keeps raw returns.
  The release sends the turn-limit note as one more tool response holding
  ``<think></think><answer></answer>``; ``release`` reads it as its scorer does
  (``limit_note_as_response``): on general data R_acc is 0 and the format rule counts the note's
  tags (so a tagged answer after the note is a format error and none is not), the note counts as
  one more successful call in N_succ/N_total, and the turn after it enters the turn statistics
  with the note's return.
- ``outcome-only``: GRPO on R_acc + R_format (the paper's "GRPO-reward" baseline).
- ``deepeyes``: DeepEyes' own reward (the paper's "DeepEyes reward" baseline), no turn term.
  General data: 0.8·acc + 0.2·format + 1.2 · 1[correct] · 1[an image came back] (format −1 on an
  error, so −0.2); math data: 1.2·acc + 0.4·format and no tool bonus (DeepEyes' math scorer).
- The ablations of the paper's §4.4 and Figure 9, as named profiles: ``paper-no-turn`` (w/o
  R_turn: turn weight 0), ``paper-delta0`` (δ = 0), ``paper-gamma5`` (γ = 5).

R_acc / R_format use the release's values in every profile: accuracy ·1.0 (``deepeyes``: 0.8)
and −0.2 on a format error for general data, accuracy ·1.2 and −0.4 for math.
``tests/test_reward_verdicts.py`` pins ``release`` and ``deepeyes`` to verdicts recorded from the
outside scorers themselves.
Override any field with ``dataclasses.replace(get_profile("paper"), delta=0.0)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from codedance.errors import SettingsError

TOOL_TERMS = ("bat", "release", "deepeyes", "none")


@dataclass(frozen=True)
class RewardProfile:
    """All settings of one reward design. ``weights`` are (term name, weight) pairs for the
    terms ``accuracy``, ``format`` and ``tool`` (weight 0 = computed and logged only)."""

    name: str
    tool_term: str = "bat"
    gamma: float = 4.0
    delta: float = 0.2
    form: str = "sigmoid"
    mu_source: str = "accuracy"  # or "score" (release)
    prefactors_general: tuple[float, float] = (0.5, 1.0)  # (wrong, correct)
    prefactors_math: tuple[float, float] = (0.5, 1.0)
    acc_scale_general: float = 1.0
    acc_scale_math: float = 1.2
    format_penalty_general: float = 0.2
    format_penalty_math: float = 0.4
    long_answer_zeroes_accuracy: bool = True
    limit_note_as_response: bool = False  # release: the turn-limit note read as a tool response
    use_turn_verdicts: bool = False
    deepeyes_bonus_general: float = 1.2  # paid when correct and an image came back
    deepeyes_bonus_math: float = 0.0
    weights: tuple[tuple[str, float], ...] = (("accuracy", 1.0), ("format", 1.0), ("tool", 1.0))
    beta: float = 0.2
    turn_penalty: float = -0.5
    empty_call_is_failure: bool = True
    turn_weight: float = 1.0
    turn_scope: str = "call_turns"  # or "all_turns" (Eq. 2 over every assistant turn)
    turn_std_fallback: str = "zero"  # or "raw" (release)
    adv_scale: str = "group"  # GRPO: "group" std, "batch" std, or "none" (Dr. GRPO)

    def __post_init__(self) -> None:
        checks = {
            "tool_term": (self.tool_term, TOOL_TERMS),
            "form": (self.form, ("sigmoid", "tanh")),
            "mu_source": (self.mu_source, ("accuracy", "score")),
            "turn_scope": (self.turn_scope, ("all_turns", "call_turns")),
            "turn_std_fallback": (self.turn_std_fallback, ("zero", "raw")),
            "adv_scale": (self.adv_scale, ("group", "batch", "none")),
        }
        for field_name, (value, allowed) in checks.items():
            if value not in allowed:
                raise SettingsError(f"{field_name} must be one of {allowed}, got {value!r}")
        unknown = {n for n, _ in self.weights} - {"accuracy", "format", "tool"}
        if unknown:
            raise SettingsError(f"unknown reward terms in weights: {sorted(unknown)}")

    def weight(self, term: str) -> float:
        return dict(self.weights).get(term, 0.0)

    def prefactors(self, domain: str) -> tuple[float, float]:
        return self.prefactors_math if domain == "math" else self.prefactors_general

    def acc_scale(self, domain: str) -> float:
        return self.acc_scale_math if domain == "math" else self.acc_scale_general

    def format_penalty(self, domain: str) -> float:
        return self.format_penalty_math if domain == "math" else self.format_penalty_general

    def deepeyes_bonus(self, domain: str) -> float:
        return self.deepeyes_bonus_math if domain == "math" else self.deepeyes_bonus_general


PROFILES: dict[str, RewardProfile] = {
    "paper": RewardProfile(name="paper"),
    "release": RewardProfile(
        name="release",
        tool_term="release",
        form="tanh",
        mu_source="score",
        prefactors_general=(0.5, 1.5),
        prefactors_math=(1.0, 2.0),
        turn_weight=0.2,
        turn_scope="call_turns",
        turn_std_fallback="raw",
        limit_note_as_response=True,
    ),
    "outcome-only": RewardProfile(name="outcome-only", tool_term="none", turn_weight=0.0),
    "deepeyes": RewardProfile(
        name="deepeyes", tool_term="deepeyes", turn_weight=0.0, acc_scale_general=0.8
    ),
    "paper-all-turns": RewardProfile(name="paper-all-turns", turn_scope="all_turns"),
    "paper-no-turn": RewardProfile(name="paper-no-turn", turn_weight=0.0),
    "paper-delta0": RewardProfile(name="paper-delta0", delta=0.0),
    "paper-gamma5": RewardProfile(name="paper-gamma5", gamma=5.0),
}
ABLATIONS = ("paper", "outcome-only", "deepeyes", "paper-no-turn", "paper-delta0", "paper-gamma5")


def get_profile(profile: str | RewardProfile, **overrides: object) -> RewardProfile:
    """A profile by name (or as given), with field overrides.

    >>> get_profile("release").form, get_profile("paper", delta=0.0).delta
    ('tanh', 0.0)
    """
    base = profile if isinstance(profile, RewardProfile) else PROFILES.get(profile)
    if base is None:
        raise SettingsError(f"unknown reward profile {profile!r}; known: {sorted(PROFILES)}")
    return replace(base, **overrides) if overrides else base  # type: ignore[arg-type]
