"""Proving a scenario: running what a model wrote, contained, and judging what it measures.

Execute's samples agreeing with Execute's own tools and checkers shows that a scenario is consistent;
this package holds what runs that code and what asks whether the scenario measures an agent:

- ``sandbox/``: the one sandbox for code a model wrote (samples, the judge, Bash);
- ``evaluation/``: the evaluation harness (samples replayed, checkers run, failures classified) and the
  gates that prove a scenario (floors, mutants, a blind solver, coverage, duplicates);
- ``export/``: the scenario as an Inspect AI task, and ``baton try`` on it;
- ``processes``, ``cpu_slots``, ``priority``: limited child processes, a CPU slot per core, niceness.

It depends on ``context`` and ``scenarios`` only: the agents use it (RunEvaluation), the workers run it
(``baton evaluate``, ``export``, ``try``); it never imports them. What it needs of a scenario's settings
it is given.
"""
