"""``python -m baton``: the same command line as the ``baton`` entry point (``workers.cli``)."""
