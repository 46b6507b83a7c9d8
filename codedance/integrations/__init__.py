"""Integrations with training frameworks: the only code that imports verl, torch or TRL."""
