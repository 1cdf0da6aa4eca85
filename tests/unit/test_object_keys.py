"""Object keys: the one rule both stores share, and the filesystem store's root (EXP-2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import ConfigError, load_settings
from app.object_store.filesystem import FilesystemObjectStore, read_download_token
from app.object_store.port import InvalidObjectKey, key_prefix, validate_key


@settings(max_examples=400, deadline=None)
@given(st.text(min_size=0, max_size=80))
def test_any_accepted_key_stays_inside_the_root(tmp_path_factory, key):
    root = tmp_path_factory.getbasetemp() / "objects-root"
    store = FilesystemObjectStore(root, secret_key="k" * 32)
    try:
        validate_key(key)
    except InvalidObjectKey:
        with pytest.raises(InvalidObjectKey):
            store.path_of(key)
        return
    path = store.path_of(key).resolve()
    assert store.root in path.parents
    assert ".." not in key.split("/") and "\x00" not in key and not key.startswith("/")


@given(
    st.lists(
        st.from_regex(r"[A-Za-z0-9_=-][A-Za-z0-9._=-]{0,20}", fullmatch=True),
        min_size=1,
        max_size=8,
    )
)
def test_keys_of_plain_segments_are_accepted(segments):
    key = "/".join(segments)
    if any(s in {".", ".."} for s in segments):
        return
    assert validate_key(key) == key
    assert key_prefix(key) == segments[0]


def test_download_tokens_are_bound_to_the_secret(tmp_path):
    store = FilesystemObjectStore(tmp_path, secret_key="a" * 32)
    token = store.url_for("exports/1/x.csv", 60).rsplit("/", 1)[1]
    assert read_download_token("a" * 32, token)["k"] == "exports/1/x.csv"
    with pytest.raises(Exception, match="bad_signature"):
        read_download_token("b" * 32, token)
    with pytest.raises(Exception, match="expired"):
        read_download_token("a" * 32, token, now=10**12)


def test_object_store_settings_are_checked_and_secrets_redacted():
    with pytest.raises(ConfigError) as error:
        load_settings(env={}, overrides={"object_store": {"backend": "s3"}})
    assert "object_store.bucket" in str(error.value)
    with pytest.raises(ConfigError) as error:
        load_settings(
            env={},
            overrides={"object_store": {"backend": "s3", "bucket": "b", "access_key_id": "AKIA1"}},
        )
    assert "secret_access_key" in str(error.value) and "AKIA1" not in str(error.value)
    with pytest.raises(ConfigError):
        load_settings(env={}, overrides={"object_store": {"delete_concurrency": 0}})
    settings, _ = load_settings(
        env={
            "NETMAP_OBJECT_STORE_BACKEND": "s3",
            "NETMAP_OBJECT_STORE_BUCKET": "netmap",
            "NETMAP_OBJECT_STORE_ACCESS_KEY_ID": "AKIAEXAMPLE",
            "NETMAP_OBJECT_STORE_SECRET_ACCESS_KEY": "very-secret",
        }
    )
    assert settings.object_store.delete_concurrency == 3
    assert settings.exports.retention_hours == 72
    from app.config import redacted_snapshot

    snapshot = redacted_snapshot(settings)["object_store"]
    assert snapshot["secret_access_key"] == "<set>" and snapshot["access_key_id"] == "<set>"
    assert "very-secret" not in str(redacted_snapshot(settings))
