"""How the CLI fails: what went wrong, then what to do, and exit code 2; never a traceback."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import kombu.exceptions
import redis
import typer
from rich.text import Text

from agents.config import ConfigError
from agents.models import ModelError
from agents.settings_layers import ARGUMENT
from scenarios.confined import unwritable
from scenarios.store import StoreError
from workers.app import BROKER_ENVS, broker_url, mask_secrets, mask_url
from workers.render import err


def unwritable_path(exc: Exception) -> StoreError | None:
    """A write refused by the file system (read-only, no permission) outside ``scenarios.confined``'s writes (the
    scenario lock, a new scenario's folder), said with the folder it was in; None for any other error."""
    if not isinstance(exc, OSError) or not isinstance(exc.filename, str) or not os.path.isabs(exc.filename):
        return None
    return unwritable(exc, Path(exc.filename).parent)


class CliError(Exception):
    """A failure the user can act on: what went wrong, then what to do."""

    def __init__(self, message: str, hint: str = "", code: int = 2):
        super().__init__(message)
        self.hint, self.code = hint, code


# How Redis says no to a password: redis-py raises AuthenticationError for most of them, but
# through kombu only the text is left (WRONGPASS: wrong password; NOAUTH: none was sent).
AUTH_FAILURE_MARKS = ("WRONGPASS", "NOAUTH", "invalid password", "invalid username-password",
                      "Authentication required", "AUTH <password> called without any password configured")


def is_auth_failure(exc: BaseException) -> bool:
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return True
    text = str(exc)
    return any(mark.lower() in text.lower() for mark in AUTH_FAILURE_MARKS)


def broker_help(url: str, exc: BaseException) -> CliError:
    """What to do when the broker said no: a wrong or missing password, or no answer at all.
    The URL and the detail are masked: neither may print the password."""
    where, detail = mask_url(url), mask_secrets(str(exc))
    if is_auth_failure(exc):
        return CliError(
            f"authentication failed at the broker {where} ({detail})",
            f"put Redis's requirepass in {' or '.join(BROKER_ENVS)}, between `redis://:` and `@host:port/0` "
            "(URL-encoded); with Docker Compose both come from REDIS_PASSWORD (docs/deployment.md)",
        )
    return CliError(
        f"the broker at {where} is unreachable ({detail})",
        "start Redis (`redis-server` or `docker compose up redis`), or unset "
        f"{' and '.join(BROKER_ENVS)} to run embedded in this process",
    )


def config_hint(message: str) -> str:
    """Where to fix a bad setting: only the places the message names as a value's source
    (agents/settings_layers.py labels each value with its file, variable or the command line)."""
    command_line = "the value given on the command line"
    marks = ((ARGUMENT, command_line), ("scenario.toml", "scenario.toml"),
             ("environment variable BATON_", "the BATON_* environment variable"))
    places = [place for mark, place in marks if mark in message]
    if places == [command_line]:
        return f"fix {command_line}"
    return f"fix {' or '.join(places)} named above" if places else "fix the setting named above"


def fail(exc: CliError) -> NoReturn:
    # Text objects, not markup: messages quote TOML tables such as [agents.init].
    # Masked here as well, so no message (a broker error quoted in any other one) prints a password.
    err.print(Text.assemble(("error: ", "bold red"), mask_secrets(str(exc))), soft_wrap=True)
    if exc.hint:
        err.print(Text.assemble(("what to do: ", "bold"), mask_secrets(exc.hint)), soft_wrap=True)
    raise typer.Exit(exc.code)


F = TypeVar("F", bound=Callable[..., Any])


def guarded(command: F) -> F:
    """Turn the errors a user can cause into a message and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except CliError as exc:
            fail(exc)
        except ConfigError as exc:
            fail(CliError(str(exc), config_hint(str(exc))))
        except StoreError as exc:  # its message already says what to do
            fail(CliError(str(exc)))
        except (redis.exceptions.RedisError, kombu.exceptions.OperationalError) as exc:
            fail(broker_help(broker_url() or "?", exc))
        except ModelError as exc:
            fail(CliError(f"model: {exc}"))
        except (ValueError, OSError) as exc:
            fail(CliError(str(unwritable_path(exc) or f"{exc.__class__.__name__}: {exc}")))
        except (typer.Exit, typer.Abort, click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise  # typer's and click's own exits and usage errors (both are RuntimeErrors)
        except Exception as exc:  # a bug: still no traceback by default, and the disk is left as it was
            if os.environ.get("BATON_DEBUG"):
                raise
            fail(CliError(f"unexpected {exc.__class__.__name__}: {exc}",
                          "the scenario folder is intact; `baton status` shows where it stands. "
                          "Rerun with BATON_DEBUG=1 for the traceback and report it"))

    return wrapper  # type: ignore[return-value]
