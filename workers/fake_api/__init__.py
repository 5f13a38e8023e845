"""``baton fake-api``: a local Anthropic-compatible API double whose answers come from the simulated model.

One idea per module (docs/fake-api.md): ``catalogue`` (the Models API table), ``counting``
(how many tokens a request is), ``cache`` (prompt-cache accounting), ``rules`` (what the
real API rejects), ``faults`` (what only a model can do wrong, on demand), ``latency``
(how long a reply waits, as a real model's would), ``stats``, ``seal`` (the double's
signatures), ``thinking`` (preserved thinking and its prefix check), ``compaction`` (the
on-demand compaction request) and ``compaction_block`` (the block sent back), ``editing``
(context editing), ``clock`` (the cache's clock a test moves), ``answer`` (a request in,
a Messages API body out) and ``server`` (HTTP routing).
Transport faults (429, 529, 5xx, stalls, bad bodies) are not here: AgentBreak, a chaos
proxy put in front of the double, makes them.
"""
