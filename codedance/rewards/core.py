"""The adaptive tool reward's formulas (paper §3.1, Eq. 1 and 2, Appendix 8), as pure functions.

    d(μ)     = σ(γ·(0.5 − μ)) − δ                                    (paper, form="sigmoid")
    d(μ)     = (1 + tanh(γ·(0.5 − μ)))/2 − δ = σ(2γ·(0.5 − μ)) − δ    (release, form="tanh")
    R_seq    = (p_wrong if not correct else p_right) · d(μ) · N_succ / N_total,  0 without calls
    R_turn^m = r^m + β·R_turn^(m+1),  r^m = penalty if turn m's call failed else 0

The paper prints the prefactor as (5 + 5·1[R_acc>0]) and d = σ(γ(5 − μ)); 0.5 is meant (the
appendix and the release agree), so the defaults are p = (0.5, 1.0). The release uses
(0.5, 1.5) for general data and (1.0, 2.0) for math. Scalars in, floats out; `difficulty_scale`
also maps over numpy arrays. Invalid inputs (NaN, N_succ > N_total, negative counts) raise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FORMS = ("sigmoid", "tanh")


def difficulty_scale(mu_acc, gamma: float = 4.0, delta: float = 0.2, *, form: str = "sigmoid"):
    """The group-difficulty factor d(μ); −δ < d < 1 − δ for every real μ, decreasing in μ.

    ``mu_acc`` is a float or a numpy array (then an array of the same shape is returned).

    >>> round(difficulty_scale(0.5), 6)          # σ(0) − 0.2
    0.3
    >>> round(difficulty_scale(0.0), 6), round(difficulty_scale(1.0), 6)   # σ(2) − .2, σ(−2) − .2
    (0.680797, -0.080797)
    >>> round(difficulty_scale(1.0, form="tanh"), 6)  # release: (1 + tanh(−2))/2 − 0.2 = σ(−4) − .2
    -0.182014
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if isinstance(mu_acc, (int, float)) and not isinstance(mu_acc, bool):  # scalar fast path
        if not math.isfinite(mu_acc):
            raise ValueError(f"mu_acc must be finite, got {mu_acc!r}")
        z = gamma * (0.5 - mu_acc) * (2.0 if form == "tanh" else 1.0)
        return 0.5 * (1.0 + math.tanh(0.5 * z)) - delta
    mu = np.asarray(mu_acc, dtype=np.float64)
    if not np.all(np.isfinite(mu)):
        raise ValueError(f"mu_acc must be finite, got {mu_acc!r}")
    z = gamma * (0.5 - mu) * (2.0 if form == "tanh" else 1.0)
    d = 0.5 * (1.0 + np.tanh(0.5 * z)) - delta  # σ(z) = (1 + tanh(z/2))/2, no overflow
    return float(d) if d.ndim == 0 else d


def sign_flip_mu(gamma: float = 4.0, delta: float = 0.2) -> float:
    """μ* = 0.5 − σ⁻¹(δ)/γ, where d changes sign (paper Appendix 8.2.2); needs 0 < δ < 1.

    >>> round(sign_flip_mu(), 6)   # 0.5 + ln(4)/4
    0.846574
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"d changes sign only for 0 < delta < 1, got {delta}")
    return 0.5 - math.log(delta / (1.0 - delta)) / gamma


def sequence_tool_reward(
    correct: bool,
    n_success: int,
    n_total: int,
    mu_acc: float,
    *,
    gamma: float = 4.0,
    delta: float = 0.2,
    prefactors: tuple[float, float] = (0.5, 1.0),
    form: str = "sigmoid",
) -> float:
    """R_seq of one trajectory. ``prefactors`` = (when wrong, when correct).

    >>> round(sequence_tool_reward(True, 2, 2, 0.5), 6)     # 1.0 · 0.3 · 1
    0.3
    >>> round(sequence_tool_reward(False, 1, 2, 0.0), 6)    # 0.5 · 0.680797 · 0.5
    0.170199
    >>> sequence_tool_reward(True, 0, 0, 0.25)              # no tool call: 0
    0.0
    """
    if n_total < 0 or n_success < 0 or n_success > n_total:
        raise ValueError(f"need 0 <= n_success <= n_total, got {n_success} of {n_total}")
    if n_total == 0:
        return 0.0
    prefactor = prefactors[1] if correct else prefactors[0]
    return float(
        prefactor * difficulty_scale(mu_acc, gamma, delta, form=form) * n_success / n_total
    )


def turn_returns(failed: Sequence[bool], beta: float = 0.2, penalty: float = -0.5) -> np.ndarray:
    """Discounted per-turn returns R_turn^m, one per assistant turn, the answer turn last.

    ``failed[m]`` says whether turn m's tool call failed (no-call turns and the answer turn are
    False). Shape: (len(failed),) float64.

    >>> turn_returns([True, False, False]).tolist()          # −0.5 + 0.2·0, ...
    [-0.5, 0.0, 0.0]
    >>> turn_returns([False, True, False]).tolist()          # 0.2·(−0.5), −0.5, 0
    [-0.1, -0.5, 0.0]
    >>> turn_returns([True, True, False]).round(6).tolist()   # −0.5 + 0.2·(−0.5)
    [-0.6, -0.5, 0.0]
    """
    flags = np.asarray(failed, dtype=bool)
    if flags.ndim != 1:
        raise ValueError("failed must be a 1-D sequence of booleans")
    out = np.zeros(flags.shape[0], dtype=np.float64)
    running = 0.0
    for m in range(flags.shape[0] - 1, -1, -1):
        running = (penalty if flags[m] else 0.0) + beta * running
        out[m] = running
    return out
