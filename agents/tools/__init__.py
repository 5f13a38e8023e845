"""The agents' tools, one module per family; ``registry.tools_for`` lists a role's tools."""
