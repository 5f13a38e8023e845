"""The tools of ``tools/tools.py`` as a model sees them: name, description and a JSON
schema of their arguments, read from the source with ``ast`` (generated code is never
imported into baton) and completed from the samples' own calls
(and, for a tool without a docstring, its line in the design).

A parameter's type comes from its annotation when it is a plain one (``str``, ``int``,
``float``, ``bool``, ``list``, ``dict``, ``list[str]``...), else from the values the
samples pass for it (``"O1001"`` makes a string, ``89.0`` a number); a parameter with
neither has no type constraint. A parameter with a default is optional.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from scenarios.folder import RECORD_BYTES, Folder
from scenarios.store import StoreError

JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
              "list": "array", "dict": "object", "None": "null"}


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of type object


class ToolSpecError(ValueError):
    """tools.py cannot be read as tools; the message says what to fix."""


def tool_specs(tools_py: Path, samples: list[dict[str, Any]], design: str = "",
               source: str | None = None) -> list[ToolSpec]:
    """``design``: the design's text, where a line like ``- get_order(order_id): what it
    returns`` describes a tool that has no docstring. ``source``: tools.py's text as the caller read it
    (through the scenario folder's one way in); by default read from beside it, no link followed."""
    try:
        text = source if source is not None else Folder(tools_py.parent).read_text(tools_py.name, RECORD_BYTES)
        tree = ast.parse(text, filename=str(tools_py))
    except (OSError, StoreError, SyntaxError) as exc:
        raise ToolSpecError(f"{tools_py} cannot be parsed ({exc}); fix it and evaluate the iteration again") from exc
    seen = _values_by_argument(samples)
    any_tool: dict[str, list[Any]] = {}
    for by_arg in seen.values():
        for arg, values in by_arg.items():
            any_tool.setdefault(arg, []).extend(values)
    specs = [_spec(fn, {**any_tool, **seen.get(fn.name, {})}, design) for fn in tree.body
             if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and not fn.name.startswith("_")]
    if not specs:
        raise ToolSpecError(f"{tools_py} defines no public function: there is no tool to export")
    return specs


def _values_by_argument(samples: list[dict[str, Any]]) -> dict[str, dict[str, list[Any]]]:
    seen: dict[str, dict[str, list[Any]]] = {}
    for sample in samples:
        for action in sample.get("actions", []):
            for arg, value in action.get("args", {}).items():
                seen.setdefault(action["tool"], {}).setdefault(arg, []).append(value)
    return seen


def _spec(fn: ast.FunctionDef | ast.AsyncFunctionDef, seen: dict[str, list[Any]], design: str) -> ToolSpec:
    args = fn.args
    positional = [*args.posonlyargs, *args.args][1:]  # the first parameter is the scenario data
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [(a, d is not None) for a, d in zip(positional, defaults)]
    params += [(a, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    doc = ast.get_docstring(fn) or ""
    properties = {a.arg: {**_schema(a.annotation, seen.get(a.arg, [])), "description": _arg_text(a.arg, doc)}
                  for a, _ in params}
    required = [a.arg for a, optional in params if not optional]
    summary = doc.strip().split("\n\n")[0].replace("\n", " ")
    description = summary or _designed(fn.name, design) or f"The {fn.name} tool."
    schema = {"type": "object", "properties": properties, "required": required,
              "additionalProperties": args.kwarg is not None}
    return ToolSpec(name=fn.name, description=description, parameters=schema)


def _arg_text(name: str, doc: str) -> str:
    """What the docstring says of the argument (a ``name: text`` or ``name (type): text``
    line, as in an Args section), else its name in words: Inspect requires one."""
    match = re.search(rf"^\s*{re.escape(name)}\s*(?:\([^)]*\))?\s*:\s*(.+)$", doc, flags=re.MULTILINE)
    return match.group(1).strip() if match else name.replace("_", " ").capitalize() + "."


def _designed(name: str, design: str) -> str:
    """The description a design line gives the tool: ``- name(args): description``."""
    pattern = rf"^\s*[-*]\s*`?{re.escape(name)}\s*\([^)]*\)`?\s*(?::|--|\u2014|-)\s*(.+)$"
    match = re.search(pattern, design, flags=re.MULTILINE)
    return match.group(1).strip() if match else ""


def _schema(annotation: ast.expr | None, values: list[Any]) -> dict[str, Any]:
    declared = _annotation_schema(annotation) if annotation is not None else None
    if declared is not None:
        return declared
    types = sorted({_value_type(v) for v in values})
    if "integer" in types and "number" in types:
        types.remove("integer")
    if not types:
        return {}
    return {"type": types[0]} if len(types) == 1 else {"type": types}


def _annotation_schema(node: ast.expr) -> dict[str, Any] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.Name) and node.id in JSON_TYPES:
        return {"type": JSON_TYPES[node.id]}
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("list", "List"):
        items = _annotation_schema(node.slice)
        return {"type": "array", **({"items": items} if items else {})}
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ("dict", "Dict"):
        return {"type": "object"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # str | None
        left, right = _annotation_schema(node.left), _annotation_schema(node.right)
        if left and right and isinstance(left.get("type"), str) and isinstance(right.get("type"), str):
            return {"anyOf": [left, right]}
    return None


def _value_type(value: Any) -> str:
    # bool before int: True is an int to Python, a boolean to JSON.
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "null")
