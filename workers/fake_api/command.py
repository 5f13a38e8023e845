"""``baton fake-api``: build the double from the command's options and serve until Ctrl-C."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from agents.simulated import SimulatedModel, known_scripts
from workers.errors import CliError
from workers.fake_api.catalogue import Catalogue, CatalogueError
from workers.fake_api.faults import FAULT_KINDS, FaultOrder
from workers.fake_api.latency import Latency, LatencyError, parse_latency, parse_output_speed
from workers.fake_api.server import FakeApi, make_server


def fault_order(option: str) -> FaultOrder:
    """``--fault KIND`` or ``--fault KIND:COUNT``."""
    kind, _, count = option.partition(":")
    if kind not in FAULT_KINDS:
        raise CliError(f"unknown fault {kind!r}", f"use one of: {', '.join(FAULT_KINDS)} (optionally KIND:COUNT)")
    if count and not (count.isdigit() and int(count) > 0):
        raise CliError(f"--fault {option}: the count must be a positive integer", "e.g. --fault refusal:2")
    return FaultOrder(fault=kind, count=int(count or 1))  # type: ignore[arg-type]  # checked above


def latency_settings(latency: str | None, output_speed: str | None, seed: int,
                     catalogue: Catalogue) -> Latency:
    """``--latency BASE[,JITTER]``, ``--output-speed N|MODEL=N,...`` and ``--seed`` as the double's delay."""
    try:
        base_s, jitter_s = parse_latency(latency) if latency else (0.0, 0.0)
        default, speeds = parse_output_speed(output_speed, catalogue.by_id) if output_speed else (None, {})
        return Latency(base_s=base_s, jitter_s=jitter_s, default_speed=default, speeds=speeds, seed=seed)
    except LatencyError as err:
        raise CliError(str(err), "see docs/fake-api.md, section Latency") from None


def describe(latency: Latency) -> str:
    """One line saying how replies are delayed, for the start banner."""
    if not latency.active:
        return "replies are not delayed (--latency, --output-speed)"
    speeds = [f"{speed:g} tokens/s" for speed in [latency.default_speed] if speed is not None]
    speeds += [f"{model}: {speed:g} tokens/s" for model, speed in latency.speeds.items()]
    jitter = f" ± {latency.jitter_s:g}s (seed {latency.seed})" if latency.jitter_s else ""
    return f"message replies wait {latency.base_s:g}s{jitter}" + (f", then output at {', '.join(speeds)}"
                                                                   if speeds else "")


def serve(port: int, host: str, catalogue: Path | None, faults: list[str], hang_s: float,
          say: Callable[[str], None], latency: str | None = None, output_speed: str | None = None,
          seed: int = 0, play: str | None = None) -> None:
    if not 0 < port < 65536:
        raise CliError(f"--port {port} is not a TCP port", "pass a port between 1 and 65535, e.g. --port 8765")
    if hang_s < 0:
        raise CliError("--hang-seconds must be 0 or more")
    try:
        models = Catalogue.from_file(catalogue) if catalogue else Catalogue()
    except CatalogueError as err:
        raise CliError(str(err), "a catalogue file is a JSON array of models (docs/fake-api.md)") from None
    api = FakeApi(catalogue=models, hang_s=hang_s, latency=latency_settings(latency, output_speed, seed, models),
                  model=played(play))
    for option in faults:
        api.faults.add(fault_order(option))
    try:
        server = make_server(api, host, port)
    except OSError as err:
        hint = "pick another --port" if err.errno == errno.EADDRINUSE else "check --host and --port"
        raise CliError(f"cannot listen on {host}:{port}: {err.strerror or err}", hint) from None
    url = f"http://{host}:{server.server_address[1]}"
    say(f"fake Anthropic API (answers by the simulated model) on {url}; Ctrl-C stops it")
    say(describe(api.latency))
    if play is not None:
        say(f"every request is answered with the {play} example's script, whatever scenario it names (--play)")
    say(f"point baton at it: ANTHROPIC_API_KEY=x ANTHROPIC_BASE_URL={url} baton run NAME")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def played(play: str | None) -> SimulatedModel:
    """The model behind the double: by default it recognises each scenario (by its brief, else its name);
    with ``--play EXAMPLE`` it plays that example for every request, so copies of an example under other
    names (a scale or multi-host rehearsal) run through the double."""
    if play is None:
        return SimulatedModel()
    if play not in known_scripts():
        raise CliError(f"--play {play}: the simulated model has no script of that name",
                       f"pass one of: {', '.join(known_scripts())}")
    return SimulatedModel(play)
