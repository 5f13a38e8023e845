"""tau2's utils, as far as a domain's data model imports them (written by baton)."""
