"""Evaluation on the paper's benchmarks: loaders, scoring, agent metrics, runner, report
(docs/eval.md)."""
