"""``from loguru import logger``, for a domain's tools that log (written by baton): what they log goes to stderr,
which a sample's trace keeps. A real loguru, where installed, comes first on the path and is used instead."""

from __future__ import annotations

import sys
from typing import Any


class _Logger:
    def _say(self, level: str, message: Any, *args: Any, **kwargs: Any) -> None:
        text = str(message).format(*args, **kwargs) if args or kwargs else str(message)
        print(f"{level} {text}", file=sys.stderr)

    def debug(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._say("DEBUG", message, *args, **kwargs)

    def info(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._say("INFO", message, *args, **kwargs)

    def warning(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._say("WARNING", message, *args, **kwargs)

    def error(self, message: Any, *args: Any, **kwargs: Any) -> None:
        self._say("ERROR", message, *args, **kwargs)


logger = _Logger()
