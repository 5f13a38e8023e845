"""The two agents of a scenario: Init designs, Execute builds and evaluates (docs/agents.md)."""

from typing import Literal

Role = Literal["init", "execute"]
ROLES: tuple[Role, ...] = ("init", "execute")
