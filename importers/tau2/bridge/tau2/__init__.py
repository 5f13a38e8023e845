"""The part of tau2-bench's package a carried domain imports, written by baton (see ../__init__.py); the domain's
own modules sit beside it under ``domains/``, copied from the user's checkout with its licence."""
