"""Settings: flags > environment > TOML file > defaults, and bad values end in a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest

from stompmq.config import load_config


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
    config = load_config(["--ack-timeout", "2.5", "--heart-beat", "100,200", "--max-frame-size", "10"], environ={})
    assert config.broker().ack_timeout == 2.5
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
