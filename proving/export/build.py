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

from proving import processes as processes_module
from proving.evaluation import child as child_module
from proving.evaluation import communicate as communicate_module
from proving.evaluation import compare as compare_module
from proving.evaluation.models import Report
from proving.evaluation.quality import Quality
from proving.evaluation.report_file import ReportFile, read_report
from proving.evaluation.samples import load_samples
from proving.export import docker_files
from proving.export.facts import ScenarioFacts
from proving.export.tool_specs import ToolSpecError, tool_specs
from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import Layout, StoreError, load_json

FORMAT = "baton-inspect-export/1"
RUNTIME = Path(__file__).with_name("runtime")
SHARED_MODULES = {  # baton's own stdlib-only modules that the export runs as they are
    "processes.py": Path(processes_module.__file__),
    "compare.py": Path(compare_module.__file__),
    "communicate.py": Path(communicate_module.__file__),
    "child_main.py": child_module.CHILD_SCRIPT,
}
RUNTIME_MODULES = ("session.py", "offline_tokens.py", "box.py", "sandbox.py", "agents.py", "users.py",
                   "user_check.py", "conversation.py", "user_simulator.md")


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
    refused: list[str] = []  # links and special files of tools/ and checkers/ that were not copied


def export_inspect(root: Path, out: Path, facts: ScenarioFacts, iteration: int | None = None) -> Exported:
    """Export the asked iteration (or the latest that reached the target) of the scenario at ``root`` to ``out``,
    with what the caller read of its settings (``facts``)."""
    layout = Layout(root)
    config = facts
    chosen, report, warning = choose_iteration(layout, config.target_success_rate, iteration)
    folder = layout.outputs(chosen)
    scenario = Folder(layout.root)  # the one way in: no link followed, regular files only, bounded reads
    samples = _samples(scenario, folder)
    design = "\n\n".join(scenario.read_text_or(p, "", RECORD_BYTES)
                         for p in scenario.glob(layout.design, "*.md", kinds=("file",)))
    try:
        source = scenario.read_text(folder / "tools" / "tools.py", RECORD_BYTES)
        specs = tool_specs(folder / "tools" / "tools.py", samples, design, source=source)
    except (ToolSpecError, StoreError) as exc:
        raise ExportError(str(exc)) from None
    data = _initial_data(scenario, folder)
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
        "limits": (report.limits if report else facts.default_limits).model_dump(),
        "user_simulator": facts.user_simulator,
        "quality": _quality(scenario, folder),
    }
    refused = _write(out, scenario, folder, spec)
    if refused:
        note = (f"{len(refused)} file(s) of the iteration were not exported, being links or special files "
                f"(only regular files are copied): {'; '.join(refused[:5])}")
        warning = f"{warning}; {note}" if warning else note
    return Exported(folder=out, scenario=config.name, iteration=chosen, samples=len(samples),
                    tools=[s.name for s in specs], success_rate=spec["success_rate"], warning=warning,
                    refused=refused)


def _quality(scenario: Folder, folder: Path) -> dict[str, Any] | None:
    """What the gates measured of the exported iteration (report.json's ``quality``: figures, which gates ran or
    not, and how many findings), for whoever runs the export; None when no gate ran on it."""
    try:
        report = scenario.read_json(folder / "report.json", "the evaluation report", RECORD_BYTES)
        quality = Quality.model_validate(report["quality"]) if isinstance(report, dict) and "quality" in report \
            else None
    except (StoreError, ValueError):
        return None
    if quality is None:
        return None
    return {"figures": quality.figures.model_dump(mode="json"), "ran": quality.ran, "skipped": quality.skipped,
            "findings": len(quality.findings)}


def choose_iteration(layout: Layout, target: float, asked: int | None) -> tuple[int, Report | None, str | None]:
    """The asked iteration, or the latest one whose evaluation reached the target. A damaged report.json is
    said to be damaged (``report_file``), never taken for an iteration that was not evaluated."""
    found = {n: read_report(layout.root, n) for n in Folder(layout.root).iterations("execution_outputs")}
    reports = {n: f.report for n, f in found.items()}
    if not reports:
        raise ExportError(f"{layout.root.name} has no iteration yet: run it first (baton run {layout.root.name})")
    if asked is not None:
        if asked not in reports:
            raise ExportError(f"{layout.root.name} has no iteration {asked}; it has {_listed(found)}")
        if found[asked].problem:
            raise ExportError(f"{found[asked].damage()}; {found[asked].remedy(layout.root.name)}")
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
            f"no iteration of {layout.root.name} reached its target of {target:.0%} ({_listed(found)}); "
            "run it on, or export one anyway with --iteration K"
        )
    later = [f.damage() for n, f in found.items() if f.problem and n > max(passing)]
    return max(passing), reports[max(passing)], "; ".join(later) or None


def policy_text(layout: Layout, name: str, description: str, data: dict[str, Any]) -> str:
    """The system message of the model under test: who it is, the business rules as the
    design states them, and the facts of the environment (data.json's top-level values)."""
    rules_path = layout.design / "business_rules.md"
    try:
        # A link here (to a credentials file, say) is refused, never followed into the model's system message.
        rules = Folder(layout.root).read_text(rules_path, RECORD_BYTES).strip()
    except (OSError, StoreError) as exc:
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


def _listed(found: dict[int, ReportFile]) -> str:
    said = [f"iteration {n}: " + (f"{f.report.success_rate:.0%}" if f.report else
                                  f"report.json damaged ({f.problem})" if f.problem else "not evaluated")
            for n, f in found.items()]
    return ", ".join(said) or "none"


def _samples(scenario: Folder, folder: Path) -> list[dict[str, Any]]:
    if not scenario.is_dir(folder / "samples"):
        raise ExportError(f"{folder} has no samples/ folder: nothing to export")
    files = load_samples(scenario.root, folder / "samples")
    bad = [f.problem for f in files if f.problem]
    if bad:
        raise ExportError(f"{len(bad)} sample(s) of {folder.name} are not valid, so the export would not "
                          f"match the evaluation: {'; '.join(bad[:3])}")
    if not files:
        raise ExportError(f"{folder}/samples holds no sample: nothing to export")
    return [f.raw for f in files if f.raw is not None]


def _initial_data(scenario: Folder, folder: Path) -> dict[str, Any]:
    path = folder / "tools" / "data.json"
    try:
        data = load_json(scenario.read_bytes(path))  # nesting bounded: a 200,000-deep file is an error, not a crash
    except (OSError, ValueError) as exc:  # StoreError is a ValueError: a link or FIFO is refused
        raise ExportError(f"{path} cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ExportError(f"{path} must hold a JSON object")
    return data


def _write(out: Path, scenario: Folder, folder: Path, spec: dict[str, Any]) -> list[str]:
    """Build the export beside ``out`` and move it in place: a reader never sees half an
    export, and a folder that is not an earlier export is never overwritten. tools/ and checkers/ are
    copied as regular files and folders only; what was refused is returned ("path: what it is")."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; --out names the folder to write the task into")
    if out.exists() and any(out.iterdir()) and not _is_export(out):
        raise ExportError(f"{out} exists and is not a baton export; choose an empty or new folder for --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    refused: list[str] = []
    try:
        for sub in ("tools", "checkers"):
            if scenario.is_dir(folder / sub):
                found = scenario.copy_tree(folder / sub, staging / sub, skip=_compiled)
                refused += [f"{sub}/{entry}" for entry in found]
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
        for name, text in docker_files.files(spec["limits"]["memory_mb"]).items():  # for --sandbox docker
            (staging / name).write_text(text, encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return refused


def _compiled(name: str) -> bool:
    """Python's caches: never part of an export (they would be stale, or planted)."""
    return name == "__pycache__" or name.endswith(".pyc")


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
        "The policy is the system message; each sample starts from a fresh copy of tools/data.json. "
        "A sample scores 1 when the final data has the expected actions' effects (free text the agent "
        "writes, such as a refund's reason, is not compared), its expected_state holds, and every checker "
        "accepts; the explanation names what differed.\n\n"
        f"{_conversations(spec['samples'])}"
        "## Where the scenario's code runs\n\n"
        "tools/ and checkers/ were written by a model: treat them as hostile. Every tool call and the judge "
        "(the replay of the expected actions, then the checkers) run through Inspect's sandbox, one "
        "`python3 baton_runtime/box.py` each, in a child process with the limits in scenario.json.\n\n"
        "- By default the task's own sandbox, `baton_bwrap` (baton_runtime/sandbox.py; bubblewrap, Linux): "
        "each call in namespaces of its own (no network, no view of this machine's processes), no "
        "capabilities, an empty environment, the system and this folder's code read-only, a fresh /work "
        f"({docker_files.WORK_MB} MB) and /tmp ({docker_files.TMP_MB} MB) the only places it can write; "
        "nothing it starts outlives it.\n"
        "- `inspect eval task.py --sandbox docker` runs the same in a container built from compose.yaml and "
        "the Dockerfile here (no network, no capabilities, read-only, bounded /work and /tmp). Any other "
        f"sandbox provider works too: it needs a python3 and this folder's code at {docker_files.EXPORT_ROOT}.\n"
        "- Where bubblewrap is missing or cannot make namespaces here (another OS, a container without user "
        "namespaces), the calls run UNCONFINED on this machine, as the user running Inspect, with only an "
        "empty environment and a process group of their own that is killed afterwards. Inspect warns, and "
        "each sample's log says so (the sample's and the score's metadata `sandbox`, and its transcript). "
        "BATON_EXPORT_BWRAP names the bwrap to use.\n"
    )


def _conversations(samples: list[dict[str, Any]]) -> str:
    """The README's word on conversational samples, when there are any (docs/conversations.md)."""
    talking = [s["id"] for s in samples if isinstance(s.get("user"), dict)]
    if not talking:
        return ""
    return (
        "## Conversations\n\n"
        f"{len(talking)} sample(s) are conversations with a simulated user ({', '.join(talking[:5])}"
        f"{', ...' if len(talking) > 5 else ''}): the model under test gets the user's opening message and talks "
        "with the user, who gives the facts it holds only when asked, until the user stops or the turn limit. "
        "The user is `-T user=scripted` (the default: deterministic, offline) or any Inspect model, e.g. "
        "`inspect eval task.py --model <provider/model> -T user=<provider/model>`. A trial in which the user "
        "leaked a fact it must hold back, or never gave one it was asked for, is the user simulator's fault: "
        "its score's metadata says so (`simulator_fault`), and the metrics `agent_accuracy` and "
        "`simulator_faults` count it apart from the agent's failures.\n\n"
    )


def _baton_version() -> str:
    try:
        return version("baton")
    except PackageNotFoundError:
        return "unknown"
