"""Test settings and the renderer release names the suite builds.

``make_settings`` gives Settings pointing at a test database with small,
test-friendly values; a test passes ``section={...}`` to change one section.
The root conftest's ``settings`` fixture is ``make_settings(database_url, tmp_path)``.
"""

from __future__ import annotations

from app.config import Settings, load_settings

TEST_SECRET_KEY = "test-secret-key-not-for-production-use-0123456789"
# Special-use classes the test configuration allows: the default's private ranges plus
# loopback, which the suite's real servers and nmap runs use (docs/security.md).
TEST_SPECIAL_USE_TARGETS = ("loopback", "private")

# Renderer releases built once per session by the real build command (``renderer_releases``).
RENDERER_RELEASES = ("renderer-1.0.0", "renderer-2.0.0")
FAULTY_RELEASE = "renderer-faulty"
DIES_AFTER_SELF_TEST_RELEASE = "renderer-dies-after-self-test"


def make_settings(database_url: str, tmp_path, **sections) -> Settings:
    overrides = {
        "database": {"url": database_url, "pool_size": 5, "max_overflow": 5},
        "security": {"secret_key": TEST_SECRET_KEY},
        "server": {"data_dir": str(tmp_path / "var")},
        "runner": {"idle_backoff_max_seconds": 0.2, "shutdown_timeout_seconds": 10.0},
        # The suite scans 127.0.0.0/8 with real nmap: loopback is allowed here (SCN-7).
        "scan": {"special_use_targets": TEST_SPECIAL_USE_TARGETS},
        # Tests run a definition several times in a row; the cooldown has its own tests.
        "reports": {"run_now_cooldown_seconds": 0.0},
    }
    for name, values in sections.items():
        overrides.setdefault(name, {}).update(values)
    settings, _check = load_settings(env={}, overrides=overrides)
    return settings
