"""The offline demo (the world wing, beside `codedance.world`, `codedance.teacher` and
`codedance.synth`): world tasks → the expert teacher through the real loop and sandbox → grades →
rewards → advantages → a report.

- `codedance.demo.run`: `DemoConfig`, `run_demo` (the run directory, resumable).
- `codedance.demo.summary`: scoring the run and the per skill × difficulty rows.
- `codedance.demo.report`: the HTML report (the conversation through `codedance.runs.html`).

    from codedance.demo import DemoConfig, run_demo
    result = run_demo(DemoConfig(tasks=6, rollouts=2, out="runs/demo-quick"))
"""

from codedance.demo.run import DemoConfig, DemoResult, demo_tasks, run_demo

__all__ = ["DemoConfig", "DemoResult", "demo_tasks", "run_demo"]
