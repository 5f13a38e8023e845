from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.config import AgentConfig, ConfigError
from agents.settings_layers import PROFILES, load_scenario_config, parse_int, resolve_agents, resolve_config
from context.policy import Policy

NO_ENV: dict[str, str] = {}


def write_toml(tmp_path: Path, body: str, name: str = "demo-scenario") -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(f'name = "{name}"\n{body}', encoding="utf-8")
    return path


# ---- defaults and profiles ---------------------------------------------------------


SPEC_TABLE = {
    "init": {
        "model": "opus",
        "window": 200_000,
        "threshold": 150_000,
        "keep_last_steps": 3,
        "queue": "init",
        "effort": "high",
        "compactor": "api",  # the replay's choice for Init (docs/context.md, "The API's own context tools")
    },
    "execute": {
        "model": "sonnet",
        "window": 1_000_000,
        "threshold": 700_000,
        "keep_last_steps": 5,
        "queue": "execute",
        "effort": "medium",
        "compactor": "summary",
    },
}
SHARED_DEFAULTS = {
    "backend": "auto", "batch": 5, "start_tokens": 10_000, "payback_calls": 30, "max_tokens": 32_000,
    "summary_max_tokens": 16_000, "summary_temperature": 0.0, "summary_timeout_s": 120.0, "bash_enabled": False,
    "bash_sandbox": "bwrap", "bash_timeout_s": 60.0, "output_cap_chars": 30_000, "eval_timeout_s": 10.0,
    "bash_disk_mb": 1024,
    "eval_disk_mb": 1024,
    "eval_memory_mb": 512, "max_steps_per_turn": 150, "temperature": None, "max_output_tokens": None,
    # the context engine's own settings, settable since the config has a context section
    "result_cap_chars": 40_000, "kept_cap_chars": 5_000, "read_lines": 10, "min_verbatim_steps": 2,
    "compressor": "per_tool", "opening_cap_chars": 10_000,
    "todo_recap": True, "recap_every_steps": 8, "summary_cap_share": 0.15,
    # thinking (docs/agents.md, "Thinking and the prefix")
    "thinking": "adaptive", "thinking_display": "updates",
}


@pytest.mark.parametrize("role", ["init", "execute"])
def test_defaults_equal_the_spec_table(role):
    config = resolve_config(role, env=NO_ENV)
    assert config.settings() == {"role": role, **SPEC_TABLE[role], **SHARED_DEFAULTS}
    assert config == AgentConfig(role=role)


def test_demo_profile_shrinks_windows():
    configs = resolve_agents(None, env=NO_ENV, profile="demo")
    init, execute = configs["init"], configs["execute"]
    assert (init.context.window, init.context.threshold) == (16_000, 11_000)
    assert (execute.context.window, execute.context.threshold) == (24_000, 18_000)
    for config in configs.values():
        assert (config.context.start_tokens, config.context.max_tokens, config.model.summary_max_tokens) == (
            2_000,
            2_048,
            1_500,
        )
    assert init.model.name == "opus" and execute.context.keep_last_steps == 5  # the rest is unchanged


def test_default_profile_changes_nothing():
    assert PROFILES["default"] == {}
    assert resolve_config("execute", env=NO_ENV, profile="default") == AgentConfig(role="execute")


def test_profile_choice_argument_then_environment_then_toml(tmp_path):
    toml = write_toml(tmp_path, 'profile = "demo"\n')
    assert resolve_config("init", scenario_toml=toml, env=NO_ENV).context.window == 16_000
    assert resolve_config("init", scenario_toml=toml, env={"BATON_PROFILE": "default"}).context.window == 200_000
    both = resolve_config("init", scenario_toml=toml, env={"BATON_PROFILE": "default"}, profile="demo")
    assert both.context.window == 16_000


def test_profile_is_the_lowest_layer(tmp_path):
    toml = write_toml(tmp_path, "[agents.init]\nthreshold = 9_500\n")
    assert resolve_config("init", scenario_toml=toml, env=NO_ENV, profile="demo").context.threshold == 9_500


@pytest.mark.parametrize(
    "kwargs, source",
    [
        ({"profile": "huge"}, "explicit argument"),
        ({"env": {"BATON_PROFILE": "huge"}}, "environment variable BATON_PROFILE"),
    ],
)
def test_unknown_profile_lists_the_profiles(kwargs, source):
    with pytest.raises(ConfigError) as error:
        resolve_config("init", **{"env": NO_ENV, **kwargs})
    message = str(error.value)
    assert "'huge'" in message and "default, demo" in message and source in message


def test_unknown_profile_in_toml(tmp_path):
    toml = write_toml(tmp_path, 'profile = "huge"\n')
    with pytest.raises(
        ConfigError, match=r"scenario\.toml: profile: unknown profile 'huge'; known profiles: default, demo"
    ):
        resolve_config("init", scenario_toml=toml, env=NO_ENV)


# ---- resolution order --------------------------------------------------------------


def test_each_layer_beats_the_one_below(tmp_path):
    # the demo profile (window 24k) is the lowest layer; each layer above sets the same field
    toml = write_toml(tmp_path, "[agents.execute]\nthreshold = 15_000\n")
    env = {"BATON_EXECUTE_THRESHOLD": "16k"}
    args = {"threshold": 17_000}

    def threshold(**kwargs) -> int:
        return resolve_config("execute", **{"env": NO_ENV, "profile": "default", **kwargs}).context.threshold

    assert threshold() == 700_000
    assert threshold(profile="demo") == 18_000
    assert threshold(profile="demo", scenario_toml=toml) == 15_000
    assert threshold(profile="demo", scenario_toml=toml, env=env) == 16_000
    assert threshold(profile="demo", scenario_toml=toml, env=env, overrides=args) == 17_000
    assert threshold(profile="demo", env=env) == 16_000  # and the layers below are optional


def test_role_table_beats_shared_agents_table(tmp_path):
    toml = write_toml(tmp_path, "[agents]\nbatch = 2\nbash_enabled = true\n[agents.execute]\nbatch = 7\n")
    configs = resolve_agents(tmp_path, env=NO_ENV)  # a scenario folder works as well as its toml
    assert (configs["init"].context.batch, configs["execute"].context.batch) == (2, 7)
    assert configs["init"].tools.bash_enabled and configs["execute"].tools.bash_enabled
    assert resolve_agents(toml, env=NO_ENV) == configs


def test_role_variable_beats_shared_variable():
    env = {"BATON_BATCH": "2", "BATON_EXECUTE_BATCH": "7"}
    configs = resolve_agents(None, env=env)
    assert (configs["init"].context.batch, configs["execute"].context.batch) == (2, 7)


def test_overrides_can_target_one_role():
    overrides = {"keep_last_steps": 4, "execute": {"keep_last_steps": 6}, "batch": None}
    configs = resolve_agents(None, env=NO_ENV, overrides=overrides)
    assert (configs["init"].context.keep_last_steps, configs["execute"].context.keep_last_steps) == (4, 6)
    assert configs["init"].context.batch == 5  # None means "flag not given"


# ---- environment parsing -----------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("700000", 700_000),
        ("700_000", 700_000),
        ("700k", 700_000),
        ("1M", 1_000_000),
        ("1.5m", 1_500_000),
        (" 42 ", 42),
    ],
)
def test_parse_int(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["", "seven", "1.5", "1.0005k", "10 k"])
def test_parse_int_rejects(text):
    with pytest.raises(ValueError):
        parse_int(text)


def test_environment_values_are_parsed_to_the_field_type():
    env = {
        "BATON_INIT_BASH_ENABLED": "yes",
        "BATON_EXECUTE_BASH_ENABLED": "0",
        "BATON_SUMMARY_TIMEOUT_S": "90.5",
        "BATON_INIT_TEMPERATURE": "0.3",
        "BATON_EXECUTE_TEMPERATURE": "none",
        "BATON_EXECUTE_MODEL": "claude-sonnet-4",
        "BATON_BACKEND": "simulated",
        "BATON_EXECUTE_WINDOW": "1M",
        "BATON_EXECUTE_THRESHOLD": "800k",
    }
    configs = resolve_agents(None, env=env)
    init, execute = configs["init"], configs["execute"]
    assert init.tools.bash_enabled is True and execute.tools.bash_enabled is False
    assert init.model.summary_timeout_s == execute.model.summary_timeout_s == 90.5
    assert (init.model.temperature, execute.model.temperature) == (0.3, None)
    assert execute.model.name == "claude-sonnet-4" and init.model.backend == execute.model.backend == "simulated"
    assert execute.context.threshold == 800_000


def test_unrelated_baton_variables_are_ignored():
    env = {
        "BATON_PROFILE": "default",
        "BATON_BROKER_URL": "redis://localhost:6379/0",
        "BATON_TEST_REDIS_URL": "redis://x",
        "BATON_ROLE": "whatever",
        "ANTHROPIC_API_KEY": "sk-ant-api03-secret",
    }
    configs = resolve_agents(None, env=env)
    assert configs == {"init": AgentConfig(role="init"), "execute": AgentConfig(role="execute")}


def test_api_key_is_never_part_of_the_config():
    config = resolve_config("execute", env={"ANTHROPIC_API_KEY": "sk-ant-api03-secret"})
    assert "sk-ant" not in config.model_dump_json()
    with pytest.raises(ConfigError):
        resolve_config("execute", env=NO_ENV, overrides={"api_key": "sk-ant-api03-secret"})


def test_misspelt_role_variable_is_an_error():
    with pytest.raises(ConfigError, match="BATON_EXECUTE_THRESHHOLD"):
        resolve_config("init", env={"BATON_EXECUTE_THRESHHOLD": "1"})


@pytest.mark.parametrize(
    "name, text", [("BATON_EXECUTE_WINDOW", "big"), ("BATON_BASH_ENABLED", "maybe"), ("BATON_EVAL_TIMEOUT_S", "ten")]
)
def test_unparsable_environment_value_names_the_variable(name, text):
    with pytest.raises(ConfigError) as error:
        resolve_config("execute", env={name: text})
    assert name in str(error.value) and repr(text) in str(error.value)


# ---- errors name the setting, the value and the source -----------------------------


def test_threshold_above_window_names_both_sources(tmp_path):
    toml = write_toml(tmp_path, "[agents.execute]\nwindow = 200_000\n")
    with pytest.raises(ConfigError) as error:
        resolve_config("execute", scenario_toml=toml, env={"BATON_EXECUTE_THRESHOLD": "800000"})
    assert str(error.value) == (
        "execute.threshold = 800000 (from environment variable BATON_EXECUTE_THRESHOLD) must be below "
        f"execute.window = 200000 (from {toml} [agents.execute])"
    )


def test_error_names_shared_toml_table(tmp_path):
    toml = write_toml(tmp_path, "[agents]\nkeep_last_steps = 0\n")
    with pytest.raises(ConfigError, match=r"init\.keep_last_steps = 0 \(from .*scenario\.toml \[agents\]\)"):
        resolve_config("init", scenario_toml=toml, env=NO_ENV)


def test_error_names_explicit_argument():
    with pytest.raises(ConfigError, match=r"init\.threshold = 250000 \(from explicit argument\) must be below "
                                          r"init\.window = 200000 \(from built-in default\)"):
        resolve_config("init", env=NO_ENV, overrides={"threshold": 250_000})


def test_error_names_profile_as_source():
    with pytest.raises(ConfigError, match=r"init\.threshold = 11000 \(from profile 'demo'\) must be below "
                                          r"init\.window = 8000 \(from explicit argument\)"):
        resolve_config("init", env=NO_ENV, profile="demo", overrides={"window": 8_000})


def test_threshold_plus_output_must_fit_the_window():
    with pytest.raises(
        ConfigError,
        match=r"init\.threshold = 195000 .* plus init\.max_tokens = 32000 \(from built-in default\) must fit",
    ):
        resolve_config("init", env=NO_ENV, overrides={"threshold": 195_000})


@pytest.mark.parametrize("field", ["keep_last_steps", "batch"])
def test_n_and_b_must_be_at_least_one(field):
    with pytest.raises(ConfigError, match=rf"execute\.{field} = 0 \(from environment variable BATON_{field.upper()}\)"):
        resolve_config("execute", env={f"BATON_{field.upper()}": "0"})


@pytest.mark.parametrize("field", ["summary_timeout_s", "bash_timeout_s", "eval_timeout_s"])
def test_timeouts_must_be_positive(field):
    with pytest.raises(ConfigError, match=rf"init\.{field} = 0"):
        resolve_config("init", env=NO_ENV, overrides={field: 0})


def test_summary_must_fit_the_window():
    with pytest.raises(ConfigError, match=r"init\.summary_max_tokens = 16000 .* must be below init\.window = 16000"):
        resolve_config("init", env=NO_ENV, profile="demo", overrides={"summary_max_tokens": 16_000})


def test_wrong_type_in_toml_names_field_and_source(tmp_path):
    toml = write_toml(tmp_path, '[agents.init]\nwindow = "200k"\n')
    with pytest.raises(
        ConfigError, match=r"init\.window = '200k' \(from .*scenario\.toml \[agents\.init\]\): .*integer"
    ):
        resolve_config("init", scenario_toml=toml, env=NO_ENV)


def test_all_field_errors_are_reported_together():
    with pytest.raises(ConfigError) as error:
        resolve_config("init", env=NO_ENV, overrides={"batch": 0, "backend": "openai"})
    assert "init.batch = 0" in str(error.value) and "init.backend = 'openai'" in str(error.value)


def test_direct_construction_validates_too():
    with pytest.raises(ValidationError, match=r"init\.threshold = 300000 must be below init\.window = 200000"):
        AgentConfig(role="init", threshold=300_000)
    config = AgentConfig(role="init")
    with pytest.raises(ValidationError, match="frozen"):
        config.context.window = 1


# ---- scenario.toml -----------------------------------------------------------------


def test_load_scenario_config(tmp_path):
    toml = write_toml(tmp_path, 'description = "refunds"\ntarget_success_rate = 0.9\nmax_iterations = 5\n'
                                "[agents.execute]\nthreshold = 600000\n")
    scenario = load_scenario_config(toml)
    assert (scenario.name, scenario.description, scenario.target_success_rate, scenario.max_iterations) == (
        "demo-scenario", "refunds", 0.9, 5
    )
    assert scenario.profile is None and scenario.agents == {"execute": {"threshold": 600_000}}


def test_scenario_defaults(tmp_path):
    scenario = load_scenario_config(write_toml(tmp_path, ""))
    assert (scenario.target_success_rate, scenario.max_iterations, scenario.agents) == (0.85, 3, {})


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "[agents.execute]\nthreshhold = 1\n",
            r"unknown setting 'threshhold' \(did you mean 'threshold'\?\) in \[agents\.execute\]; "
            r"valid settings: model, ",
        ),
        (
            "[agents]\nwindoww = 1\n",
            r"unknown setting 'windoww' .* in \[agents\]; valid settings: .*, plus the init and execute tables",
        ),
        ("[agents]\ninit = 3\n", r"\[agents\.init\] must be a table"),
        ("colour = 'red'\n", r"unknown key 'colour'; valid keys: name, description, target_success_rate"),
        ("target_success_rate = 2\n", r"target_success_rate = 2: .*less than or equal to 1"),
        ("max_iterations = 0\n", r"max_iterations = 0: .*greater than or equal to 1"),
        ("max_iterations = '3'\n", r"max_iterations = '3': .*integer"),
    ],
)
def test_scenario_errors_name_file_and_key(tmp_path, body, expected):
    toml = write_toml(tmp_path, body)
    with pytest.raises(ConfigError, match=expected) as error:
        load_scenario_config(toml)
    assert str(toml) in str(error.value)
    with pytest.raises(ConfigError):
        resolve_agents(tmp_path, env=NO_ENV)


def test_missing_name(tmp_path):
    toml = tmp_path / "scenario.toml"
    toml.write_text("max_iterations = 2\n")
    with pytest.raises(ConfigError, match="missing required key 'name'"):
        load_scenario_config(toml)


def test_invalid_toml_reports_path_and_line(tmp_path):
    toml = write_toml(tmp_path, "[agents.execute\nthreshold = 1\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML: .*line 2") as error:
        load_scenario_config(toml)
    assert str(toml) in str(error.value)


def test_missing_scenario_file(tmp_path):
    with pytest.raises(ConfigError, match="scenario file not found: .*scenario.toml"):
        resolve_agents(tmp_path, env=NO_ENV)


# ---- derived values ----------------------------------------------------------------


def test_policy_maps_the_context_parameters():
    config = resolve_config("execute", env=NO_ENV, overrides={"batch": 3, "start_tokens": 0, "payback_calls": 7})
    assert config.context == Policy(
        window=1_000_000,
        threshold=700_000,
        keep_last_steps=5,
        batch=3,
        start_tokens=0,
        payback_calls=7,
        max_tokens=32_000,
    )


def test_threshold_as_a_share_of_the_window(tmp_path):
    toml = write_toml(tmp_path, "[agents.execute]\nwindow = 500_000\nthreshold = 0.7\n")
    assert resolve_config("execute", scenario_toml=toml, env=NO_ENV).context.threshold == 350_000
    env = {"BATON_INIT_THRESHOLD": "60%"}
    assert resolve_config("init", env=env).context.threshold == 120_000
    with pytest.raises(ConfigError, match=r"BATON_INIT_THRESHOLD.*share of the window"):
        resolve_config("init", env={"BATON_INIT_THRESHOLD": "140%"})


def test_any_model_id_or_line_is_accepted_until_the_catalogue_resolves_it():
    # No allowlist in code: the Models API decides what exists (agents/catalogue.py).
    config = resolve_config("execute", env=NO_ENV, overrides={"model": "claude-sonnet-5-5"})
    assert config.model.name == "claude-sonnet-5-5"
    with pytest.raises(ConfigError, match=r"execute\.model = '' \(from explicit argument\)"):
        resolve_config("execute", env=NO_ENV, overrides={"model": ""})


# ---- upper bounds the OS accepts (issue 23) ---------------------------------------------


@pytest.mark.parametrize("setting, value", [
    ("eval_timeout_s", "1e300"), ("eval_memory_mb", str(2**63 - 1)), ("bash_timeout_s", "1e18"),
    ("summary_timeout_s", "1e300"), ("window", str(2**62)), ("output_cap_chars", str(2**63 - 1)),
    ("max_steps_per_turn", str(10**12)), ("batch", str(2**40)),
])
def test_numbers_beyond_what_the_os_accepts_are_validation_errors(tmp_path, setting, value):
    toml = write_toml(tmp_path, f"[agents.execute]\n{setting} = {value}\n")
    with pytest.raises(ConfigError) as error:
        resolve_agents(tmp_path, env=NO_ENV)
    message = str(error.value)
    assert f"execute.{setting} = " in message and str(toml) in message and "less than or equal" in message
    with pytest.raises(ConfigError, match=rf"BATON_EXECUTE_{setting.upper()}"):
        resolve_config("execute", env={f"BATON_EXECUTE_{setting.upper()}": value})


def test_the_largest_accepted_limits_still_resolve(tmp_path):
    write_toml(tmp_path, "[agents.execute]\neval_timeout_s = 86_400.0\neval_memory_mb = 1_048_576\n")
    tools = resolve_agents(tmp_path, env=NO_ENV)["execute"].tools
    assert (tools.eval_timeout_s, tools.eval_memory_mb) == (86_400.0, 1_048_576)


def test_a_deeply_nested_scenario_toml_is_a_config_error(tmp_path):
    path = write_toml(tmp_path, "x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="too deeply"):
        load_scenario_config(path)


def test_absurd_iterations_and_prices_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="max_iterations"):
        load_scenario_config(write_toml(tmp_path, "max_iterations = 9223372036854775807\n"))
    price = '[prices."claude-x"]\ninput = 1e300\noutput = 1.0\ncache_write = 1.0\ncache_read = 0.1\n'
    with pytest.raises(ConfigError, match="prices"):
        load_scenario_config(write_toml(tmp_path, price))
