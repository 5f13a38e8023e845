"""Export a scenario's passing iteration as a task for the harnesses its users run
(Inspect AI), and try a model under test on it (docs/export.md)."""
