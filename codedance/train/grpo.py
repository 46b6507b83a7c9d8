"""A small single-process GRPO trainer (torch + transformers) sharing the algorithm code with verl.

One step: pick ``prompts_per_step`` training tasks, sample ``group_size`` rollouts of each with
our loop (`run_lockstep`: `codedance.rollout.Episode` decisions, the real sandbox, the model's
sampled token ids kept), grade them (`codedance.grading.grade_trajectory`, rules only), compute
rewards (`codedance.rewards.compute_batch_rewards` under the profile, each task under its domain:
``domains`` maps task ids to ``math``, others are ``general``) and per-token advantages
(`codedance.advantages.batch_token_advantages`: A_seq + A_turn) — the very functions the verl
plugin uses — then ``mini_batches`` optimizer steps of the clipped surrogate (`loss`), each over
micro-batches with gradient accumulation. Old log-probs are recomputed on the training sequence
before the update (as verl does); the generation-time log-probs are kept only for the logged
``logprob_gap`` (the prompt of turn m+1 is rendered from text, so it can differ slightly).

Logged per step to ``out_dir/metrics.jsonl``: the rollout metrics (`metrics.rollout_metrics`),
loss, entropy, clip fraction, grad norm, tokens, seconds; rollouts to
``out_dir/rollouts/step-N/``. Checkpoints every ``save_every`` steps (`checkpoint`); a rerun
with the same ``out_dir`` resumes from the latest one (metrics rows after it are dropped).

Departures from the paper at this scale: far smaller batches (8 × 8 instead of 256 × 8), a
larger learning rate for a from-scratch tiny model, rule-based grading only (no LLM judge).
Not handled: multiple processes/GPUs (that is the verl plugin), dual clip, entropy bonus.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codedance.advantages import batch_token_advantages
from codedance.grading import grade_trajectory
from codedance.policy.base import SamplingParams
from codedance.records import ImageStore, append_jsonl, read_jsonl, trajectory_json
from codedance.rewards import BatchRewards, compute_batch_rewards, get_profile
from codedance.rollout import EpisodeSettings
from codedance.runs.rundir import episode_key
from codedance.train.checkpoint import latest_checkpoint, load_training_state, save_checkpoint
from codedance.train.config import GRPOStage, RolloutSettings
from codedance.train.device import to_model
from codedance.train.encode import EncodedTrajectory, encode_trajectory
from codedance.train.loss import clipped_surrogate, collate, loss_weights, token_logprobs
from codedance.train.metrics import rollout_metrics
from codedance.train.sampler import BatchedSampler, run_lockstep
from codedance.train.stopping import stop_requests
from codedance.train.weights import restore_weights
from codedance.types import Task, Trajectory

VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def sandbox_factory(timeout_s: float) -> Callable[[tuple], Any]:
    from codedance.sandbox import Sandbox

    return lambda images: Sandbox(images=images, timeout_s=timeout_s)


def make_sampler(
    model: Any, processor: Any, rollout: RolloutSettings, temperature: float, top_p: float = 1.0
) -> BatchedSampler:
    tok = processor.tokenizer
    suppress = [tok.convert_tokens_to_ids(t) for t in VISION_TOKENS if t in tok.get_vocab()]
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=rollout.max_tokens)
    return BatchedSampler(
        model,
        processor,
        sampling,
        suppress=suppress,
        max_prompt_tokens=rollout.max_length - rollout.max_tokens,
    )


@dataclass
class Rollouts:
    trajectories: list[Trajectory]
    tasks: list[Task]
    correct: list[bool]
    rewards: BatchRewards
    encoded: list[EncodedTrajectory]
    advantages: np.ndarray  # (B, L) float32, 0 off the loss mask


def reward_profile(stage: GRPOStage) -> Any:
    return get_profile(stage.profile, **dict(stage.profile_overrides))


class GRPOTrainer:
    """See the module docstring. `model`/`processor`: a Qwen2.5-VL and an `ImageTextProcessor`."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        stage: GRPOStage,
        rollout: RolloutSettings,
        episode: EpisodeSettings,
        train_tasks: Sequence[Task],
        out_dir: str | Path,
        *,
        profiles: str | None = None,
        domains: Mapping[str, str] | None = None,
        ref_model: Any | None = None,
        make_runner: Callable[[tuple], Any] | None = None,
        threads: int = 2,
    ) -> None:
        import torch

        self.model, self.processor, self.stage, self.rollout = model, processor, stage, rollout
        self.episode = episode.episode_config(profiles=profiles)
        self.tasks = list(train_tasks)
        self.domains = dict(domains or {})
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ref_model = ref_model
        self.make_runner = make_runner or sandbox_factory(episode.exec_timeout_s)
        self.threads = threads
        self.profile = reward_profile(stage)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=stage.lr, weight_decay=stage.weight_decay
        )
        self.step = 0

    def resume(self) -> int:
        """Load the latest checkpoint under ``out_dir`` if any; return the step reached."""
        path = latest_checkpoint(self.out)
        if path is None:
            return 0
        # a checkpoint whose weights do not load whole is refused, not trained on from other weights
        restore_weights(
            self.model,
            path,
            "delete that folder to resume from the checkpoint before it (or from the start)",
        )
        self.step = load_training_state(path, self.optimizer)
        rows = [r for r in read_jsonl(self.out / "metrics.jsonl") if r.get("step", 0) <= self.step]
        (self.out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        for later in (self.out / "rollouts").glob(
            "step-*.jsonl"
        ):  # steps after the checkpoint run again
            if later.stem.split("-")[1].isdigit() and int(later.stem.split("-")[1]) > self.step:
                later.unlink()
        return self.step

    def step_tasks(self, step: int) -> list[Task]:
        rng = np.random.default_rng([self.stage.seed, step])
        n = min(self.stage.prompts_per_step, len(self.tasks))
        return [self.tasks[i] for i in rng.choice(len(self.tasks), size=n, replace=False)]

    def collect(self, step: int) -> Rollouts:
        import torch

        tasks = [t for t in self.step_tasks(step) for _ in range(self.stage.group_size)]
        sampler = make_sampler(
            self.model, self.processor, self.rollout, self.stage.temperature, self.stage.top_p
        )
        torch.manual_seed(self.stage.seed * 1_000_003 + step)
        self.model.eval()
        trajectories = run_lockstep(
            sampler, tasks, self.make_runner, self.episode, threads=self.threads
        )
        correct = [
            grade_trajectory(trajectory=tr, task=t).correct
            for tr, t in zip(trajectories, tasks, strict=True)
        ]
        rewards = compute_batch_rewards(
            trajectories=trajectories,
            correct=correct,
            group_ids=[t.id for t in tasks],
            domains=[self.domains.get(t.id, "general") for t in tasks],
            profile=self.profile,
        )
        tok = self.processor.tokenizer
        encoded = [
            encode_trajectory(
                tr,
                tok,
                template=self.processor,
                image_tokens=self.processor.image_tokens,
                max_length=self.rollout.max_length,
            )
            for tr in trajectories
        ]
        width = max(len(e) for e in encoded)
        mask = np.zeros((len(encoded), width), dtype=np.int8)
        for row, e in enumerate(encoded):
            mask[row, : len(e)] = e.loss_mask
        adv = batch_token_advantages(
            rewards, turn_spans=[e.turn_spans for e in encoded], loss_mask=mask
        )
        return Rollouts(trajectories, tasks, correct, rewards, encoded, adv)

    def _logprobs(self, model: Any, rows: list[int], ro: Rollouts) -> Any:
        import torch

        with torch.no_grad():
            parts = []
            for start in range(0, len(rows), self.stage.micro_batch):
                chunk = rows[start : start + self.stage.micro_batch]
                batch = collate(
                    [ro.encoded[i] for i in chunk],
                    self.processor,
                    self.processor.tokenizer.pad_token_id,
                )
                parts.append(
                    token_logprobs(model, to_model(batch, model), self.stage.temperature)[0]
                )
        return parts

    def update(self, ro: Rollouts) -> dict[str, float]:
        import torch

        s = self.stage
        order = list(range(len(ro.encoded)))
        size = -(-len(order) // s.mini_batches)
        stats: dict[str, list[float]] = {
            "loss": [],
            "entropy": [],
            "clip_frac": [],
            "grad_norm": [],
            "kl": [],
        }
        old = {
            i: lp
            for i, lp in zip(
                order,
                [row for part in self._logprobs(self.model, order, ro) for row in part],
                strict=True,
            )
        }
        ref = None
        if self.ref_model is not None and s.kl_coef > 0:
            ref = {
                i: lp
                for i, lp in zip(
                    order,
                    [r for p in self._logprobs(self.ref_model, order, ro) for r in p],
                    strict=True,
                )
            }
        stats["logprob_gap"] = [_logprob_gap(ro, old)]
        self.model.train()
        for start in range(0, len(order), size):
            rows = order[start : start + size]
            total_tokens = float(sum(sum(ro.encoded[i].loss_mask[1:]) for i in rows))
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum, ent_sum = 0.0, 0.0
            for m in range(0, len(rows), s.micro_batch):
                chunk = rows[m : m + s.micro_batch]
                batch = to_model(
                    collate(
                        [ro.encoded[i] for i in chunk],
                        self.processor,
                        self.processor.tokenizer.pad_token_id,
                    ),
                    self.model,
                )
                width = batch["input_ids"].shape[1]
                logp, entropy = token_logprobs(self.model, batch, s.temperature)
                pad = [
                    torch.nn.functional.pad(
                        old[i][: width - 1], (0, width - 1 - min(len(old[i]), width - 1))
                    )
                    for i in chunk
                ]
                old_lp = torch.stack(pad)
                adv = torch.tensor(
                    np.stack(
                        [
                            np.pad(
                                ro.advantages[i, :width],
                                (0, max(0, width - ro.advantages.shape[1])),
                            )[:width]
                            for i in chunk
                        ]
                    )
                ).to(logp.device)[:, 1:]
                weights = loss_weights(
                    batch["loss_mask"],
                    s.aggregation,
                    total_tokens=total_tokens,
                    total_seqs=len(rows),
                )
                ref_lp = (
                    torch.stack(
                        [
                            torch.nn.functional.pad(
                                ref[i][: width - 1], (0, width - 1 - min(len(ref[i]), width - 1))
                            )
                            for i in chunk
                        ]
                    )
                    if ref is not None
                    else None
                )
                loss, st = clipped_surrogate(
                    logp, old_lp, adv, weights, clip=s.clip, ref_logp=ref_lp, kl_coef=s.kl_coef
                )
                loss.backward()
                loss_sum += float(loss.detach())
                ent_sum += float((entropy.detach() * batch["loss_mask"][:, 1:]).sum())
                stats["clip_frac"].append(st["clip_frac"])
                if "kl" in st:
                    stats["kl"].append(st["kl"])
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), s.grad_clip)
            self.optimizer.step()
            stats["loss"].append(loss_sum)
            stats["entropy"].append(ent_sum / max(total_tokens, 1.0))
            stats["grad_norm"].append(float(norm))
        return {k: float(np.mean(v)) for k, v in stats.items() if v}

    def train_step(self) -> dict[str, float]:
        started = time.monotonic()
        ro = self.collect(self.step)
        rolled = time.monotonic()
        update = self.update(ro)
        self.step += 1
        row = {
            "step": self.step,
            **rollout_metrics(ro.trajectories, ro.tasks, ro.correct, ro.rewards.breakdowns),
            **update,
            "tokens": float(sum(sum(e.loss_mask) for e in ro.encoded)),
            "truncated": float(np.mean([e.truncated for e in ro.encoded])),
            "rollout_s": rolled - started,
            "update_s": time.monotonic() - rolled,
        }
        append_jsonl(self.out / "metrics.jsonl", row)
        if self.stage.save_rollouts:
            folder = self.out / "rollouts"
            store = ImageStore(folder / "images")
            for k, tr in enumerate(ro.trajectories):
                append_jsonl(
                    folder / f"step-{self.step}.jsonl",
                    trajectory_json(tr, store, episode_key(tr.task_id, k)),
                )
        if self.stage.save_every and self.step % self.stage.save_every == 0:
            save_checkpoint(
                self.out,
                self.step,
                self.model,
                self.processor,
                self.optimizer,
                self.stage.keep_checkpoints,
            )
        return row

    def train(
        self,
        steps: int | None = None,
        on_step: Callable[[dict[str, float]], None] | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        """Run until ``steps`` (default: the stage's) total steps, then save a final checkpoint.

        A SIGTERM or Ctrl-C (`codedance.train.stopping`) lets the step in progress finish; that step
        is then saved as a checkpoint and ``KeyboardInterrupt`` raised, so a rerun resumes after it
        (`tests/train/test_resume.py::test_grpo_sigterm_saves_the_step_in_progress_and_resumes_from_it`).
        A second signal interrupts at once: the steps since the last checkpoint are lost."""
        target = self.stage.steps if steps is None else steps
        with stop_requests() as stop:
            while self.step < target:
                row = self.train_step()
                if on_step is not None:
                    on_step(row)
                if stop.signal is not None:
                    self._save_unless_saved()
                    log(
                        f"grpo: stopped on {stop.signal} after step {self.step}, saved in "
                        f"{self.out / 'checkpoints' / f'step-{self.step}'}"
                    )
                    raise KeyboardInterrupt
        self._save_unless_saved()

    def _save_unless_saved(self) -> None:
        if (
            latest_checkpoint(self.out) is None
            or latest_checkpoint(self.out).name != f"step-{self.step}"
        ):
            save_checkpoint(
                self.out,
                self.step,
                self.model,
                self.processor,
                self.optimizer,
                self.stage.keep_checkpoints,
            )


def _logprob_gap(ro: Rollouts, old: dict[int, Any]) -> float:
    """Mean |generation logprob − recomputed logprob| over sampled model tokens (a diagnostic)."""
    gaps: list[float] = []
    for i, (tr, e) in enumerate(zip(ro.trajectories, ro.encoded, strict=True)):
        if not e.sampled_ids:
            continue
        for turn, (a, b) in zip(tr.turns, e.turn_spans, strict=True):
            n = min(b - a, len(turn.logprobs))
            if n and a > 0:
                recomputed = old[i][a - 1 : a - 1 + n].cpu().numpy()
                gaps.append(float(np.mean(np.abs(recomputed - np.asarray(turn.logprobs[:n])))))
    return float(np.mean(gaps)) if gaps else float("nan")
