"""Benchmarks users already run, brought in as baton scenarios (docs/import.md). Each importer writes a scenario
folder with one iteration that the evaluation, the gates, ``status``, ``export`` and ``try`` treat like any other."""
