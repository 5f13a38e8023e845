"""Writing the imported scenario: ``import_domain`` reads the checkout, carries the code, replays the tasks,
converts them and writes the scenario folder whole (built beside it, then renamed into place: a failed import
leaves nothing behind), with iteration 1's ``tools/``, ``checkers/`` and ``samples/``."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from pydantic import ValidationError

from importers.tau2 import policy as policies
from importers.tau2.checkout import Domain, Tau2ImportError, read_domain
from importers.tau2.replay import Replayed, replay
from importers.tau2.report import NEVER_CARRIED, ImportReport, SkippedTask, TaskNote
from importers.tau2.tasks import agent_actions, convert, file_name, lookups_omitted, why_not
from importers.tau2.toolkit import Carried, carry
from proving.evaluation.models import Sample
from proving.evaluation.reachable import unreachable
from proving.evaluation.samples import _validation_text

CHECKER = Path(__file__).with_name("scenario_checker.py")
ITERATION = "execution_outputs/iteration_1"


def import_domain(checkout: Path, domain: str, root: Path) -> ImportReport:
    """Import ``domain`` of the tau2-bench ``checkout`` as the scenario folder ``root`` (which must not exist)."""
    if root.exists() or root.is_symlink():
        raise Tau2ImportError(f"{root} already exists", "pick another --name, or delete the folder to import again")
    found = read_domain(checkout, domain)
    carried = carry(found)
    tools = set(carried.tools)
    wanted = {t.id: agent_actions(t) for t in found.tasks if why_not(t, tools) is None}
    replayed = replay(carried.files, found.database, wanted)
    report = ImportReport(
        source=str(found.checkout), domain=domain, commit=found.commit, scenario=root.name, samples=0,
        tasks=len(found.tasks), tools=carried.tools, modules_carried=carried.modules,
        licence=found.licence[0] if found.licence else None, policy_files=found.policy_files, rules=0,
        database_file=found.database_file, sandbox="in the sandbox" if replayed.confined else
        "UNCONFINED: BATON_EVAL_SANDBOX=none", not_carried=[*NEVER_CARRIED, *carried.left])
    samples = _samples(found, replayed, tools, report)
    if not samples:
        raise Tau2ImportError(f"no task of {domain} can be carried as a baton sample: "
                              + "; ".join(sorted({s.why for s in report.skipped}))[:1500],
                              "see docs/import.md, \"What is not carried over\"")
    if replayed.initial != found.database:
        report.not_carried.append(f"{found.database_file} as written: tools/data.json is the database as the domain's "
                                  "model writes it back (fields its model fills in with defaults included), the "
                                  "form tau2 compares")
    text, rules = policies.numbered(found.policy)
    report.rules = len(rules)
    report.samples = len(samples)
    _write(root, found, carried, replayed, samples, text, report)
    return report


def _samples(found: Domain, replayed: Replayed, tools: set[str], report: ImportReport) -> list[tuple[str, dict]]:
    samples = []
    for task in found.tasks:
        converted = convert(task, found.name, replayed.tasks.get(task.id, {}), tools)
        if converted.sample is None:
            report.skipped.append(SkippedTask(task=task.id, why=converted.skipped or "not carried"))
            continue
        try:
            gap = unreachable(Sample.model_validate(converted.sample), converted.outputs)
        except ValidationError as exc:
            report.skipped.append(SkippedTask(task=task.id, why=f"it does not fit baton's sample schema: "
                                                                f"{_validation_text(exc)}"))
            continue
        if gap is not None:
            converted.notes.append(lookups_omitted(converted.sample, gap))
        if converted.failing:
            report.failing_gold.append(converted.sample["id"])
        if converted.sample.get("lookups_omitted"):
            report.lookups_omitted.append(converted.sample["id"])
        if converted.notes:
            report.task_notes.append(TaskNote(sample=converted.sample["id"], notes=converted.notes))
        if not converted.sample["expected_state"] and not converted.sample.get("communicate_info"):
            report.do_nothing_passes.append(converted.sample["id"])
        samples.append((file_name(task), converted.sample))
    return samples


def _write(root: Path, found: Domain, carried: Carried, replayed: Replayed, samples: list[tuple[str, dict]],
           rules_text: str, report: ImportReport) -> None:
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.import-", dir=root.parent))
    try:
        files = {
            "scenario.toml": _toml(root.name, found),
            "brief.md": _brief(found, report),
            "design/business_rules.md": rules_text,
            "design/scenario_design.md": _design(found, carried, report),
            "design/import_report.md": report.markdown(),
            "design/import_report.json": report.model_dump_json(indent=2) + "\n",
            f"{ITERATION}/tools/data.json": json.dumps(replayed.initial, ensure_ascii=False) + "\n",
            f"{ITERATION}/checkers/tau2_database.py": CHECKER.read_text(encoding="utf-8"),
        }
        files |= {f"{ITERATION}/tools/{relative}": text for relative, text in carried.files.items()}
        files |= {f"{ITERATION}/samples/{name}": json.dumps(sample, indent=2, ensure_ascii=False) + "\n"
                  for name, sample in samples}
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        os.rename(staging, root)  # refuses a folder that appeared meanwhile rather than merging into it
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _toml(name: str, found: Domain) -> str:
    return f'''# {name}: tau2-bench's {found.name} domain, \
imported by `baton import tau2` (design/import_report.md says what was and was not carried over).
name = "{name}"
description = "tau2-bench's {found.name} domain: its tasks, policy, database and toolkit, as a baton scenario."
target_success_rate = 1.0
max_iterations = 3

[proving]
gates = ["coverage", "duplicate", "floor", "mutation", "solver"]
solver_k = 1
# user_simulator = "scripted"   # or a model (tau2 plays its users with one): docs/conversations.md
'''


def _brief(found: Domain, report: ImportReport) -> str:
    return (f"# Brief: tau2-bench {found.name}, imported\n\n"
            f"This scenario is tau2-bench's {found.name} domain, imported from {found.checkout} by `baton import "
            f"tau2` rather than designed here. Iteration 1 holds the domain's own toolkit (carried with its licence), "
            f"its database, and one sample per task ({report.samples} of {report.tasks}); design/business_rules.md is "
            "its policy, word for word, with its rules numbered. design/import_report.md says what could not be "
            "carried over.\n\nA later iteration should keep the benchmark's tasks and fix what the gates find in "
            "them: tasks a shortcut passes, gold actions that fail or break the policy, rules no task exercises.\n")


def _design(found: Domain, carried: Carried, report: ImportReport) -> str:
    tools = "\n".join(f"- {name} ({kind.lower()})" for name, kind in carried.tools.items())
    sizes = ", ".join(f"{key}: {len(value)}" for key, value in found.database.items() if isinstance(value, dict | list))
    return (f"# tau2-bench {found.name}: scenario design (imported)\n\n"
            f"## Purpose\nThe benchmark's own tasks, audited by baton's gates. Source: {found.checkout}"
            f"{f' at {found.commit}' if found.commit else ''}.\n\n"
            f"## Tools of the agent under test\nThe domain's toolkit ({carried.kit['toolkit_class']}), each tool "
            f"calling the domain's own method on the sample's data:\n{tools}\n\n"
            f"## Data\n{found.database_file} as the domain's model ({carried.kit['db_class']}) writes it: {sizes}.\n\n"
            f"## Samples\nOne per task, `task_<id>`, each a conversation: the user's reason for calling opens it, "
            f"the user holds who they are (known info) and what they do not know (unknown info), the task's "
            f"instructions are the user's goal. Expected state: the replay of the task's expected actions. "
            f"communicate_info is scored on the agent's messages as tau2 scores it; nl_assertions are kept, not "
            f"scored. {report.samples} samples of {report.tasks} tasks.\n")
