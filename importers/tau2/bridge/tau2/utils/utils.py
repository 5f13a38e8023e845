"""What a domain's ``utils.py`` imports from ``tau2.utils.utils``: ``DATA_DIR``, which it only joins into paths
of files the scenario does not read (its data is ``tools/data.json``). Written by baton."""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
