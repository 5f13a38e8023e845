"""``baton import tau2 CHECKOUT --domain NAME``: a tau2-bench domain as a baton scenario (docs/import.md).

``checkout`` reads the user's checkout, ``toolkit`` carries the domain's code into ``tools/`` with the bridge,
``replay`` runs the expected actions to record the expected state, ``tasks`` turns tasks into samples,
``policy`` numbers the policy's rules, ``report`` says what was and was not carried, ``scenario`` writes it all."""
