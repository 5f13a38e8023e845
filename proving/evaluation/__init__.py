"""Evaluation of a generated scenario (docs/evaluation.md).

Execute writes ``execution_outputs/iteration_<n>/``: ``tools/tools.py`` and
``tools/data.json``, ``checkers/*.py`` and ``samples/*.json``. Each sample is
replayed through the tools on a fresh copy of the data and judged by the
checkers, in its own child process (``child_main.py``) with a time and a
memory limit: generated code never runs in baton's process. Every failure is
classified into one layer:

- L1 design: a checker raised ``DesignIssue`` (the rules contradict each other
  or leave the outcome undetermined);
- L2 tool: the tools fail to load, raise, return a bad value, hit a limit, or
  produce an outcome that is neither the expected one nor compliant;
- L3 checker: a checker fails to load, crashes, returns a bad value, hits a
  limit, or fails an outcome that matches the sample's expectation;
- L4 sample: the sample is malformed, names an unknown tool, or expects an
  outcome the checkers reject while they accept the actual one.

Results go to ``results.jsonl``, ``report.json`` and ``traces/<sample>.json``.
"""
