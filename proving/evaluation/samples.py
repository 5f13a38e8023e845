"""The samples on disk: every ``samples/*.json``, parsed and schema-checked up front,
so a malformed sample is an L4 before anything runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proving.evaluation.models import Sample
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import StoreError, load_json


@dataclass
class SampleFile:
    path: Path
    key: str  # the sample's id, or the file stem when the file has no usable id
    raw: dict[str, Any] | None = None
    sample: Sample | None = None
    problem: str | None = None  # why this is an L4 before anything runs


def load_samples(root: Path, samples_dir: Path) -> list[SampleFile]:
    """Every samples/*.json of the scenario folder ``root`` in name order, parsed and schema-checked, duplicates
    flagged; read through the one way into the folder (a link or FIFO named *.json is a problem, not a read)."""
    folder = Folder(Path(root))
    names = folder.names(samples_dir, "*.json", kinds=("file", "link", "special"))
    files = [_load_sample(folder, samples_dir / name) for name in names]
    seen: dict[str, Path] = {}
    for item in files:
        if item.key in seen and item.problem is None:
            item.problem = f"duplicate id {item.key!r}: samples/{seen[item.key].name} uses it too; ids must be unique"
        seen.setdefault(item.key, item.path)
    return files


def _load_sample(folder: Folder, path: Path) -> SampleFile:
    item = SampleFile(path=path, key=path.stem)
    try:
        raw = load_json(folder.read_bytes(path, RECORD_BYTES))
    except StoreError as exc:
        item.problem = f"samples/{path.name} cannot be read: {exc}"
        return item
    except (UnicodeDecodeError, ValueError) as exc:
        item.problem = f"samples/{path.name} is not valid JSON: {exc}"
        return item
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"].strip():
        item.key = raw["id"]
    try:
        item.sample = Sample.model_validate(raw)
    except ValidationError as exc:
        item.problem = f"samples/{path.name} does not fit the sample schema: {_validation_text(exc)}"
        return item
    item.raw = raw
    return item


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
