"""The authors' released data, imported into codedance's own formats (``codedance data``).

- `sft_import`: ``Peterwatwec/CodeDance-SFT`` parquet → trajectory records (`codedance.records`,
  what ``codedance sft --data`` trains on and its ms-swift/TRL exports read).
- `rl_import`: ``Peterwatwec/CodeDance-RL`` parquet → `Task` JSONL (`codedance.task_records`)
  and the verl parquet ``codedance verl prepare-data`` writes (``train.parquet`` / ``val.parquet``).
- `verify`: re-executes imported trajectories turn by turn in the real sandbox and compares with
  what they recorded.
- `stats`: tables and histograms of an imported folder.
- `formats`: the content conventions detected in the rows; `stream`: bounded-memory, resumable
  row iteration over parquet files; `ledger`: the per-row log that makes a rerun resume.

Needs pyarrow (the ``train`` or ``dev`` extra); verify needs the sandbox's host support.
"""
