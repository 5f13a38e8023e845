"""Carrying a tau2 domain's own code into a scenario's ``tools/``: the domain's modules verbatim (with the
checkout's licence), the bridge for the few ``tau2`` modules they import, and a generated ``tools.py`` with one
baton tool per ``@is_tool`` method of the domain's toolkit, each calling that method through ``tau2_glue.py``.

Everything is read with ``ast``: the domain's code runs only inside the sandbox (``replay.py``, the evaluation,
the export), never in baton's process. What cannot be carried (an import the bridge does not provide, a tool whose
signature baton cannot call) is a problem, named; the import stops on it rather than write tools that cannot load.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from importers.tau2.checkout import Domain, Tau2ImportError

BRIDGE = Path(__file__).with_name("bridge")
GLUE, KIT_FILE, TOOLS = "tau2_glue.py", "tau2_kit.json", "tools.py"
NOT_WRITING = {"READ", "THINK", "GENERIC"}  # tau2's tool types whose calls change no database


@dataclass
class Carried:
    files: dict[str, str] = field(default_factory=dict)  # path under tools/ -> text
    tools: dict[str, str] = field(default_factory=dict)  # tool name -> tau2's tool type
    kit: dict[str, Any] = field(default_factory=dict)  # tau2_kit.json
    modules: list[str] = field(default_factory=list)  # the domain's modules carried
    left: list[str] = field(default_factory=list)  # the domain's modules not carried, and why


def carry(domain: Domain) -> Carried:
    prefix = f"tau2.domains.{domain.name}"
    carried = Carried()
    bridged = _bridge_names()
    queue, seen = ["tools"], set()
    while queue:
        module = queue.pop()
        if module in seen:
            continue
        seen.add(module)
        path = domain.source_dir / f"{module}.py"
        if not path.is_file():
            raise Tau2ImportError(f"{prefix}.{module} is imported by the domain's code but {path} is missing")
        text = path.read_text(encoding="utf-8")
        carried.files[f"tau2/domains/{domain.name}/{module}.py"] = text
        carried.modules.append(f"{module}.py")
        for name, names in _imports(ast.parse(text, filename=str(path))):
            if name.startswith(prefix + "."):
                queue.append(name.removeprefix(prefix + ".").split(".")[0])
            else:
                _check_import(f"{module}.py", name, names, bridged)
    for path in sorted(domain.source_dir.glob("*.py")):
        if path.stem not in seen and path.name != "__init__.py":
            carried.left.append(f"src/tau2/domains/{domain.name}/{path.name}: not imported by the domain's tools.py "
                                "(tau2's environment, user-side tools or task builders), not carried")
    carried.files[f"tau2/domains/{domain.name}/__init__.py"] = ""
    carried.files["tau2/domains/__init__.py"] = ""
    for path in sorted(BRIDGE.rglob("*.py")):
        relative = path.relative_to(BRIDGE).as_posix()
        if relative != "__init__.py":
            carried.files[relative] = path.read_text(encoding="utf-8")
    if domain.licence is not None:
        carried.files[f"tau2/{domain.licence[0]}"] = domain.licence[1]
    tools_text = carried.files[f"tau2/domains/{domain.name}/tools.py"]
    klass, db_class, methods = _toolkit(tools_text, domain.name)
    carried.tools = {m.name: kind for m, kind in methods}
    carried.kit = {"toolkit_module": f"{prefix}.tools", "toolkit_class": klass.name,
                   "db_module": _module_of(db_class, tools_text, prefix), "db_class": db_class,
                   "read_only": sorted(n for n, kind in carried.tools.items() if kind in NOT_WRITING)}
    carried.files[KIT_FILE] = json.dumps(carried.kit, indent=2) + "\n"
    carried.files[TOOLS] = _tools_py(domain, klass.name, methods)
    return carried


def _bridge_names() -> dict[str, set[str]]:
    """Each module the bridge provides and the names it defines."""
    found: dict[str, set[str]] = {}
    for path in BRIDGE.rglob("*.py"):
        parts = path.relative_to(BRIDGE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
        names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        found[module] = names
    return found


def _imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _check_import(where: str, module: str, names: list[str], bridged: dict[str, set[str]]) -> None:
    top = module.split(".")[0]
    if top == "tau2":
        if module not in bridged:
            raise Tau2ImportError(f"{where} imports {module}, which baton's bridge does not provide",
                                  "the domain's code needs more of tau2 than its toolkit and database bases; "
                                  "this domain cannot be carried as it is")
        missing = [n for n in names if n not in bridged[module] and n != "*"]
        if missing:
            raise Tau2ImportError(f"{where} imports {', '.join(missing)} from {module}, which baton's bridge does not "
                                  "provide", "this domain's code needs more of tau2 than baton bridges")
        return
    if top in bridged or top in sys.stdlib_module_names or top == "pydantic":
        return
    if importlib.util.find_spec(top) is None:
        raise Tau2ImportError(f"{where} imports {module}, which is neither bridged nor installed with baton's Python",
                              f"install {top} into baton's environment, then import again")


def _toolkit(text: str, domain: str) -> tuple[ast.ClassDef, str, list[tuple[ast.FunctionDef, str]]]:
    tree = ast.parse(text)
    kits = [n for n in tree.body if isinstance(n, ast.ClassDef)
            and any(isinstance(b, ast.Name) and b.id == "ToolKitBase" for b in n.bases)]
    if len(kits) != 1:
        raise Tau2ImportError(f"src/tau2/domains/{domain}/tools.py defines {len(kits)} ToolKitBase classes, "
                              "expected one", "baton carries one toolkit per domain")
    klass = kits[0]
    methods = []
    for node in klass.body:
        kind = _tool_kind(node) if isinstance(node, ast.FunctionDef) else None
        if kind is not None:
            methods.append((node, kind))
    if not methods:
        raise Tau2ImportError(f"{klass.name} has no @is_tool method", "is this a tau2 domain's tools.py?")
    return klass, _db_class(klass, domain), methods


def _tool_kind(node: ast.FunctionDef) -> str | None:
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if isinstance(target, ast.Name) and target.id == "is_tool":
            argument = call.args[0] if call and call.args else None
            return argument.attr if isinstance(argument, ast.Attribute) else "READ"
    return None


def _db_class(klass: ast.ClassDef, domain: str) -> str:
    """The database model's class: the toolkit's ``db: X`` annotation, else its __init__'s ``db`` parameter's."""
    for node in klass.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "db" \
                and isinstance(node.annotation, ast.Name):
            return node.annotation.id
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for arg in node.args.args:
                if arg.arg == "db" and isinstance(arg.annotation, ast.Name):
                    return arg.annotation.id
    raise Tau2ImportError(f"{klass.name} names no database class (db: X)", f"src/tau2/domains/{domain}/tools.py")


def _module_of(name: str, text: str, prefix: str) -> str:
    for module, names in _imports(ast.parse(text)):
        if name in names:
            return module
    return f"{prefix}.tools"


def _tools_py(domain: Domain, klass: str, methods: list[tuple[ast.FunctionDef, str]]) -> str:
    head = (f'"""The tools of tau2-bench\'s {domain.name} domain, carried by `baton import tau2` (docs/import.md).\n\n'
            f"Each tool calls the method of the same name of the domain's own {klass} (tau2/domains/{domain.name}/"
            f"tools.py, from the checkout, under its licence in tau2/) through tau2_glue.py, on this sample's data.\n"
            f"Generated: edit the domain's code, not this file.\n\"\"\"\n\nfrom __future__ import annotations\n\n"
            "from tau2_glue import call\n")
    return head + "".join(_tool_function(node, kind) for node, kind in methods)


def _tool_function(node: ast.FunctionDef, kind: str) -> str:
    args = node.args
    if args.vararg or args.kwarg or args.posonlyargs:
        raise Tau2ImportError(f"tool {node.name} takes *args, **kwargs or positional-only arguments",
                              "baton calls tools with named arguments only")
    params = args.args[1:]  # self
    defaults = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
    pieces = ["data: dict"]
    for param, default in [*zip(params, defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
        text = param.arg + (f": {ast.unparse(param.annotation)}" if param.annotation is not None else "")
        if default is not None:
            try:
                ast.literal_eval(default)
            except ValueError:
                raise Tau2ImportError(f"tool {node.name}'s argument {param.arg} defaults to {ast.unparse(default)}, "
                                      "not a literal", "baton writes tools with literal defaults only") from None
            text += f" = {ast.unparse(default)}"
        pieces.append(text)
    names = [p.arg for p in [*params, *args.kwonlyargs]]
    doc = (ast.get_docstring(node) or "").replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    doc_lines = "\n".join(f"    {line}" if line else "" for line in doc.splitlines())
    call = ", ".join([f"{node.name!r}", *(f"{n}={n}" for n in names)])
    return (f"\n\ndef {node.name}({', '.join(pieces)}) -> dict:  # tau2 tool type: {kind}\n"
            f'    """\n{doc_lines}\n    """\n    return call(data, {call})\n')
