"""Written by baton, copied into an imported scenario's ``tools/``: the few modules of the ``tau2`` package a
tau2-bench domain's own code imports (its toolkit base, ``is_tool``, the database base, a pydantic base without
extra fields, the data folder), so that code runs with no tau2 installed. Only pydantic is needed, and the
standard library. Not a copy of tau2's modules: what they do that a domain's tools rely on, written anew."""
