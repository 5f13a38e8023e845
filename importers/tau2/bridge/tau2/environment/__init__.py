"""tau2's environment modules, as far as a domain's toolkit and data model import them (written by baton)."""
