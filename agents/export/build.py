"""``baton export NAME --to inspect``: a scenario's passing iteration as a folder that
Inspect AI runs (docs/export.md):

    task.py          the Inspect task (policy, tools, samples, scorer)
    scenario.json    what the task reads: the policy, the tools' schemas, the samples, the limits
    tools/ checkers/ the iteration's own files, run only in limited child processes
    baton_runtime/   the standard-library code that runs them, copied from baton
    README.md        how to run it

The folder needs Inspect AI, not baton: it can be handed to whoever evaluates agents.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agents import processes as processes_module
from agents.config import ToolSettings
from agents.evaluation import child as child_module
from agents.evaluation import compare as compare_module
from agents.evaluation.models import Limits, Report
from agents.evaluation.samples import load_samples
from agents.export.tool_specs import ToolSpecError, tool_specs
from agents.settings_layers import load_scenario_config
from scenarios.store import Layout

FORMAT = "baton-inspect-export/1"
RUNTIME = Path(__file__).with_name("runtime")
SHARED_MODULES = {  # baton's own stdlib-only modules that the export runs as they are
    "processes.py": Path(processes_module.__file__),
    "compare.py": Path(compare_module.__file__),
    "child_main.py": child_module.CHILD_SCRIPT,
}
RUNTIME_MODULES = ("session.py", "offline_tokens.py")
# An iteration never evaluated has no limits on record: the evaluation's own defaults (ToolSettings).
DEFAULT_LIMITS = Limits(timeout_s=ToolSettings.model_fields["eval_timeout_s"].default,
                        memory_mb=ToolSettings.model_fields["eval_memory_mb"].default)


class ExportError(ValueError):
    """The scenario cannot be exported as asked; the message says why and what to do."""


class Exported(BaseModel):
    folder: Path
    scenario: str
    iteration: int
    samples: int
    tools: list[str]
    success_rate: float | None
    warning: str | None = None


def export_inspect(root: Path, out: Path, iteration: int | None = None) -> Exported:
    layout = Layout(root)
    config = load_scenario_config(layout.toml)
    chosen, report, warning = choose_iteration(layout, config.target_success_rate, iteration)
    folder = layout.outputs(chosen)
    samples = _samples(folder)
    design = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(layout.design.glob("*.md")))
    try:
        specs = tool_specs(folder / "tools" / "tools.py", samples, design)
    except ToolSpecError as exc:
        raise ExportError(str(exc)) from None
    data = _initial_data(folder)
    spec = {
        "format": FORMAT,
        "name": config.name,
        "description": config.description,
        "iteration": chosen,
        "success_rate": report.success_rate if report else None,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "baton_version": _baton_version(),
        "policy": policy_text(layout, config.name, config.description, data),
        "tools": [s.model_dump() for s in specs],
        "samples": samples,
        "limits": (report.limits if report else DEFAULT_LIMITS).model_dump(),
    }
    _write(out, folder, spec)
    return Exported(folder=out, scenario=config.name, iteration=chosen, samples=len(samples),
                    tools=[s.name for s in specs], success_rate=spec["success_rate"], warning=warning)


def choose_iteration(layout: Layout, target: float, asked: int | None) -> tuple[int, Report | None, str | None]:
    """The asked iteration, or the latest one whose evaluation reached the target."""
    reports = {n: _report(layout, n) for n in _iterations(layout)}
    if not reports:
        raise ExportError(f"{layout.root.name} has no iteration yet: run it first (baton run {layout.root.name})")
    if asked is not None:
        if asked not in reports:
            raise ExportError(f"{layout.root.name} has no iteration {asked}; it has {_listed(reports)}")
        report = reports[asked]
        if report is None:
            return asked, None, f"iteration {asked} was never evaluated: its samples may not agree with its tools"
        if report.only is not None or report.success_rate < target:
            return asked, report, (f"iteration {asked} did not pass: {report.success_rate:.0%} of "
                                   f"{report.total} samples against a target of {target:.0%}")
        return asked, report, None
    passing = [n for n, r in reports.items() if r is not None and r.only is None and r.success_rate >= target]
    if not passing:
        raise ExportError(
            f"no iteration of {layout.root.name} reached its target of {target:.0%} ({_listed(reports)}); "
            "run it on, or export one anyway with --iteration K"
        )
    return max(passing), reports[max(passing)], None


def policy_text(layout: Layout, name: str, description: str, data: dict[str, Any]) -> str:
    """The system message of the model under test: who it is, the business rules as the
    design states them, and the facts of the environment (data.json's top-level values)."""
    rules_path = layout.design / "business_rules.md"
    try:
        rules = rules_path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{rules_path} cannot be read ({exc}): the policy comes from it") from None
    intro = f"You are the agent in the scenario {name!r}."
    if description:
        intro += f" {description}"
    intro += " Use the tools to look things up and to act; follow the rules below exactly."
    facts = [f"- {key}: {value}" for key, value in data.items() if isinstance(value, str | int | float | bool)]
    parts = [intro, rules]
    if facts:
        parts.append("## Facts of this environment\n" + "\n".join(facts))
    return "\n\n".join(parts) + "\n"


def _iterations(layout: Layout) -> list[int]:
    found = []
    for path in layout.root.joinpath("execution_outputs").glob("iteration_*"):
        suffix = path.name.removeprefix("iteration_")
        if suffix.isdigit() and path.is_dir():
            found.append(int(suffix))
    return sorted(found)


def _report(layout: Layout, iteration: int) -> Report | None:
    try:
        return Report.model_validate_json(layout.outputs(iteration).joinpath("report.json").read_bytes())
    except (OSError, ValueError):
        return None


def _listed(reports: dict[int, Report | None]) -> str:
    said = [f"iteration {n}: " + (f"{r.success_rate:.0%}" if r else "not evaluated") for n, r in reports.items()]
    return ", ".join(said) or "none"


def _samples(folder: Path) -> list[dict[str, Any]]:
    if not (folder / "samples").is_dir():
        raise ExportError(f"{folder} has no samples/ folder: nothing to export")
    files = load_samples(folder / "samples")
    bad = [f.problem for f in files if f.problem]
    if bad:
        raise ExportError(f"{len(bad)} sample(s) of {folder.name} are not valid, so the export would not "
                          f"match the evaluation: {'; '.join(bad[:3])}")
    if not files:
        raise ExportError(f"{folder}/samples holds no sample: nothing to export")
    return [f.raw for f in files if f.raw is not None]


def _initial_data(folder: Path) -> dict[str, Any]:
    path = folder / "tools" / "data.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ExportError(f"{path} cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path} must hold a JSON object")
    return data


def _write(out: Path, folder: Path, spec: dict[str, Any]) -> None:
    """Build the export beside ``out`` and move it in place: a reader never sees half an
    export, and a folder that is not an earlier export is never overwritten."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; --out names the folder to write the task into")
    if out.exists() and any(out.iterdir()) and not _is_export(out):
        raise ExportError(f"{out} exists and is not a baton export; choose an empty or new folder for --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for sub in ("tools", "checkers"):
            if (folder / sub).is_dir():
                shutil.copytree(folder / sub, staging / sub, ignore=ignore)
        runtime = staging / "baton_runtime"
        runtime.mkdir()
        (runtime / "__init__.py").write_text('"""Copied from baton by `baton export`; see ../README.md."""\n')
        for name, source in SHARED_MODULES.items():
            shutil.copyfile(source, runtime / name)
        for name in RUNTIME_MODULES:
            shutil.copyfile(RUNTIME / name, runtime / name)
        task = (RUNTIME / "task.py").read_text(encoding="utf-8")
        named = task.replace('@task(name="scenario")', f"@task(name={json.dumps(spec['name'])})")
        (staging / "task.py").write_text(named, encoding="utf-8")
        (staging / "scenario.json").write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        (staging / "README.md").write_text(_readme(spec), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _is_export(folder: Path) -> bool:
    try:
        return json.loads((folder / "scenario.json").read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _readme(spec: dict[str, Any]) -> str:
    rate = f"{spec['success_rate']:.0%}" if spec["success_rate"] is not None else "not evaluated"
    return (
        f"# {spec['name']}: an Inspect AI task exported by baton\n\n"
        f"Iteration {spec['iteration']} ({len(spec['samples'])} samples, {len(spec['tools'])} tools; "
        f"baton's own evaluation: {rate}), exported {spec['exported_at']}.\n\n"
        "    pip install inspect-ai\n"
        "    inspect eval task.py --model <provider/model>      # e.g. anthropic/<model id>\n"
        "    inspect view                                      # the transcripts\n\n"
        "The policy is the system message; each sample starts from a fresh copy of tools/data.json; "
        "every tool call and the checkers run in child processes with the limits in scenario.json. "
        "A sample scores 1 when the final data has the expected actions' effects (free text the agent "
        "writes, such as a refund's reason, is not compared), its expected_state holds, and every checker "
        "accepts; the explanation names what differed.\n"
    )


def _baton_version() -> str:
    try:
        return version("baton")
    except PackageNotFoundError:
        return "unknown"
