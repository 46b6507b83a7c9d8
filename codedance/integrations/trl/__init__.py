"""TRL integration: SFT on CodeDance trajectories (`sft`) and export for ms-swift / TRL (`export`).

Importing this package imports nothing heavy; `sft` needs the ``train`` extra (torch,
transformers, trl, datasets).
"""
