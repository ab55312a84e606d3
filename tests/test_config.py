"""Settings: flags > environment > TOML file > defaults, and bad values end in a usage error."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from stompmq.config import OPTIONS, Config, load_config


def test_defaults() -> None:
    config = load_config([], environ={})
    assert (config.port, config.host, config.window) == (61613, "127.0.0.1", 10_000)
    assert config.store_url.endswith("stompmq.db")


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    path = tmp_path / "stompmq.toml"
    path.write_text('port = 1000\nwindow = 7\nack_timeout = 3\n')
    config = load_config(["--config", str(path), "--port", "3000"],
                         environ={"STOMPMQ_PORT": "2000", "STOMPMQ_WINDOW": "8"})
    assert (config.port, config.window, config.ack_timeout) == (3000, 8, 3)


def test_settings_reach_the_engine_and_the_server() -> None:
    config = load_config(["--ack-timeout", "2.5", "--heart-beat", "100,200", "--max-frame-size", "10",
                          "--store-timeout", "0"], environ={})
    assert config.broker().ack_timeout == 2.5 and config.broker().store_timeout == 0
    assert load_config([], environ={}).broker().store_timeout == 30
    server = config.server()
    assert server.heart_beat == (100, 200) and server.limits.max_body == 10


@pytest.mark.parametrize("argv, environ", [
    (["--port", "abc"], {}),
    (["--heart-beat", "1,2,3"], {}),
    ([], {"STOMPMQ_PORT": "abc"}),
    (["--login", "only"], {}),
    (["--window", "0"], {}),
    (["--window-bytes", "-1"], {}),
    (["--window-bytes", "64kb"], {}),
    ([], {"STOMPMQ_MAX_UNFLUSHED_BYTES": "lots"}),
    (["--max-connections", "0"], {}),
])
def test_bad_values_are_usage_errors(argv: list[str], environ: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config(argv, environ=environ)
    assert exit_info.value.code == 2
    assert "stompmq: error:" in capsys.readouterr().err


def test_unknown_file_settings_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "stompmq.toml"
    path.write_text("prot = 1\n")
    with pytest.raises(SystemExit):
        load_config(["--config", str(path)], environ={})


def test_sizes_take_binary_units() -> None:
    config = load_config(["--window-bytes", "2MiB", "--max-unflushed-bytes", "65536", "--max-connections", "5"],
                         environ={})
    assert (config.window_bytes, config.max_unflushed_bytes) == (2 * 1024 * 1024, 65536)
    assert config.broker().window_bytes == 2 * 1024 * 1024 and config.server().max_connections == 5
    assert load_config(["--window-bytes", "1g"], environ={}).window_bytes == 1024**3
    assert load_config([], environ={}).server().max_connections is None  # derived at start


def test_bad_file_values_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stompmq.toml"
    path.write_text("window = 0\n")
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--config", str(path)], environ={})
    assert exit_info.value.code == 2
    assert "window" in capsys.readouterr().err
@pytest.mark.parametrize("argv, environ, toml, named", [
    (["--default-prefetch", "0"], {}, None, "--default-prefetch"),
    (["--max-prefetch", "-5"], {}, None, "--max-prefetch"),
    (["--port", "99999"], {}, None, "--port"),
    (["--log-level", "LOUD"], {}, None, "--log-level"),
    (["--flush-interval", "0"], {}, None, "--flush-interval"),
    (["--ack-timeout", "-1"], {}, None, "--ack-timeout"),
    (["--store-timeout", "-1"], {}, None, "--store-timeout"),
    (["--http-port", "70000"], {}, None, "--http-port"),
    ([], {"STOMPMQ_PORT": "abc"}, None, "STOMPMQ_PORT"),
    ([], {"STOMPMQ_WINDOW": "0"}, None, "STOMPMQ_WINDOW"),
    ([], {}, "max_prefetch = 0\n", "max_prefetch"),
    ([], {}, 'log_level = "LOUD"\n', "log_level"),
    ([], {}, "heart_beat = [1000]\n", "heart_beat"),
    ([], {}, "port = [\n", "not valid TOML"),
    ([], {}, "[port]\nx = 1\n", "port"),
])
def test_nonsense_is_one_line_naming_source_and_key(
    argv: list[str], environ: dict[str, str], toml: str | None, named: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if toml is not None:
        path = tmp_path / "stompmq.toml"
        path.write_text(toml)
        argv = argv + ["--config", str(path)]
    with pytest.raises(SystemExit) as exit_info:
        load_config(argv, environ=environ)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and err.startswith("stompmq: error:") and named in err, err


def test_missing_config_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--config", "/nonexistent/stompmq.toml"], environ={})
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "/nonexistent/stompmq.toml" in err


def test_toml_takes_lists_booleans_and_dashed_keys(tmp_path: Path) -> None:
    path = tmp_path / "stompmq.toml"
    path.write_text('heart-beat = [1000, 2000]\ndead-letter-rejected = true\nlog_level = "debug"\n')
    config = load_config(["--config", str(path)], environ={})
    assert (config.heart_beat, config.dead_letter_rejected, config.log_level) == ((1000, 2000), True, "DEBUG")


def test_data_dir_is_absolute_and_passwords_are_masked() -> None:
    config = load_config(["--data-dir", "relative"], environ={})
    assert config.store_url == "sqlite:///" + str(Path("relative").resolve() / "stompmq.db")
    pg = load_config(["--store", "postgresql://bob:s3cret@db:5432/mq"], environ={})
    assert pg.store_shown == "postgresql://bob:***@db:5432/mq" and "s3cret" not in str(pg.server())


def test_a_misspelt_environment_variable_is_an_error_naming_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        load_config([], environ={"STOMPMQ_PORTT": "1"})
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "STOMPMQ_PORTT" in err and "did you mean STOMPMQ_PORT?" in err


def test_variables_of_other_tools_are_allowed() -> None:
    from stompmq.config import OTHER_VARIABLES

    config = load_config([], environ={**{name: "x" for name in OTHER_VARIABLES}, "STOMPMQ_HTTP_PORT": "0",
                                      "OTHER_PORTT": "ignored: not ours"})
    assert config.http_port == 0
    assert {"STOMPMQ_ADMIN_URL", "STOMPMQ_PURE_PYTHON_CODEC", "STOMPMQ_TEST_POSTGRES_URL"} <= OTHER_VARIABLES.keys()


def test_resource_alarm_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = load_config(["--data-dir", str(tmp_path)], {}).server()
    assert (server.disk_path, server.disk_free_limit, server.memory_high_watermark) == (
        str(tmp_path.resolve()), 50 * 1024**2, 0.4)
    server = load_config(["--disk-free-limit", "0", "--memory-high-watermark", "2GiB"], {}).server()
    assert (server.disk_free_limit, server.memory_high_watermark) == (None, 2 * 1024**3)
    assert load_config(["--store", "memory"], {}).server().disk_path is None
    with pytest.raises(SystemExit) as exit_info:
        load_config(["--memory-high-watermark", "1.5"], {})
    assert exit_info.value.code == 2 and "fraction of RAM" in capsys.readouterr().err


def test_every_option_has_a_typed_field_and_every_field_an_option() -> None:
    """``Config`` is typed per option (so mypy catches ``config.ack_timout``); a field is the
    type its option's parser returns, ``| None`` where the default is None, and the default fits."""
    fields = typing.get_type_hints(Config)
    assert [f.name for f in dataclasses.fields(Config)] == [opt.key for opt in OPTIONS]
    for opt in OPTIONS:
        parsed = typing.get_type_hints(opt.type).get("return", opt.type) if not isinstance(opt.type, type) else opt.type
        expected = parsed | None if opt.default is None and type(None) not in typing.get_args(parsed) else parsed
        assert fields[opt.key] == expected, opt.key
        runtime = tuple if typing.get_origin(parsed) is tuple else parsed
        assert isinstance(opt.default, runtime | None), opt.key


def test_a_loaded_config_has_every_value_of_its_field_type() -> None:
    config = load_config(["--tls-port", "6000", "--host-names", "a,b"], environ={})
    assert (config.tls_port, config.host_names, config.ws_port) == (6000, ("a", "b"), None)
    with pytest.raises(AttributeError):
        _ = config.ack_timout  # type: ignore[attr-defined]  # the typo mypy now refuses
