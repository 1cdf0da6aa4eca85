"""[traffic] settings: ranges and cross-checks for the rollup keys."""

from __future__ import annotations

import pytest

from app.config import ConfigError, load_settings


def _load(**traffic):
    return load_settings(env={}, overrides={"traffic": traffic})[0].traffic


def test_defaults():
    traffic = _load()
    assert traffic.timezone == "+08:00"
    assert traffic.file_patterns == ("{domain}.access.log*",)
    assert (traffic.interval_seconds, traffic.day_interval_seconds) == (300.0, 3600.0)
    assert traffic.enabled is False


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"enabled": True}, "traffic.domains"),
        ({"domains": ["bad domain"]}, "traffic.domains"),
        ({"domains": ["a.example/../x"]}, "traffic.domains"),
        ({"file_patterns": ["access.log*"]}, "traffic.file_patterns"),
        ({"file_patterns": ["logs/{domain}.log"]}, "traffic.file_patterns"),
        ({"max_path_bytes": 4096}, "traffic.max_path_bytes"),
        ({"interval_seconds": 5}, "traffic.interval_seconds"),
        ({"timezone": "Mars/Olympus"}, "traffic.timezone"),
    ],
)
def test_invalid_traffic_settings_name_the_key(values, key):
    with pytest.raises(ConfigError) as failure:
        _load(**values)
    assert key in str(failure.value)


def test_domains_from_the_environment():
    settings, _ = load_settings(
        env={
            "NETMAP_TRAFFIC_DOMAINS": "a.example.com, b.example.com",
            "NETMAP_TRAFFIC_ENABLED": "1",
        }
    )
    assert settings.traffic.domains == ("a.example.com", "b.example.com")
    assert settings.traffic.enabled is True
