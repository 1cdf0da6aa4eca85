"""Real renderer worker processes (built by `netmap modules build-renderer`): handshake,
loader checks, the frame protocol and every fault path of MOD-4..6."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from app.config import load_settings
from app.modules.errors import CandidateRejected, ErrorKind, ModuleError
from app.modules.releases import locate_release
from app.modules.report_render import ProcessModule, open_candidate
from app.renderer.contract import self_test_input
from tests.support.settings import FAULTY_RELEASE, RENDERER_RELEASES
from tests.support.waiting import process_gone

FORBIDDEN_TOP_LEVEL = {
    "flask",
    "werkzeug",
    "sqlalchemy",
    "psycopg2",
    "elasticsearch",
    "elastic_transport",
    "smtplib",
    "app",
    "jobs",
    "alembic",
}


def settings_for(directory: Path, **renderer):
    settings, _ = load_settings(
        env={}, overrides={"report_renderer": {"releases_directory": str(directory), **renderer}}
    )
    return settings


def start(directory: Path, release_id: str, **kwargs) -> ProcessModule:
    options = {"max_frame_bytes": 1_048_576, "ipc_timeout": 10.0, **kwargs}
    module = ProcessModule(locate_release(directory, release_id), **options)
    module.start()
    return module


def faulty_payload(fault: str) -> dict:
    payload = self_test_input()
    payload["template"]["version"] = f"fault:{fault}"
    return payload


@pytest.fixture
def stopper():
    modules: list[ProcessModule] = []
    yield modules.append
    for module in modules:
        module.shutdown(timeout=2.0)


def test_handshake_reports_identity_clean_environment_and_only_renderer_imports(
    renderer_releases, monkeypatch, stopper
):
    monkeypatch.setenv("NETMAP_DATABASE_URL", "postgresql://netmap:hunter2@db/netmap")
    monkeypatch.setenv("NETMAP_TEST_HOST_SECRET", "must-not-leak")
    module = ProcessModule(
        locate_release(renderer_releases, RENDERER_RELEASES[0]),
        max_frame_bytes=1_048_576,
        ipc_timeout=10.0,
    )
    stopper(module)
    handshake = module.start(introspect=True)
    assert handshake["module"] == "report-render"
    assert handshake["methods"] == ["render"]
    assert handshake["rpcVersion"] == 1
    assert module.contract().release_id == RENDERER_RELEASES[0]
    assert module.pid == handshake["pid"] != os.getpid()
    loaded = {name.split(".")[0] for name in handshake["loaded_modules"]}
    assert not loaded & FORBIDDEN_TOP_LEVEL, loaded & FORBIDDEN_TOP_LEVEL
    assert {"jinja2", "nh3", "css_inline", "nmworker"} <= loaded
    assert "NETMAP_TEST_HOST_SECRET" not in handshake["environment_keys"]
    assert not [k for k in handshake["environment_keys"] if k.startswith("NETMAP")]
    module.self_test()


def test_a_built_release_runs_on_its_own_native_dependencies_without_site_packages(
    renderer_releases, tmp_path, stopper
):
    """MOD-9: the release carries MarkupSafe, nh3 and css-inline with their compiled
    extensions in lib/; its worker runs with -I -S, so the server's site-packages are
    not on its path, and it still renders (the self-test uses nh3 and css-inline)."""
    import site
    import sysconfig

    from app.modules.releases import lib_digest

    # A copy elsewhere: nothing of the build environment's paths is reachable from it.
    copy = tmp_path / "releases"
    shutil.copytree(renderer_releases / RENDERER_RELEASES[0], copy / RENDERER_RELEASES[0])
    release = locate_release(copy, RENDERER_RELEASES[0])
    assert release.self_contained
    lib = release.directory / "lib"
    manifest = json.loads((release.directory / "manifest.json").read_text())
    assert manifest["lib_sha256"] == lib_digest(lib)
    assert {p.parent.name for p in lib.rglob("*.so")} >= {"nh3", "css_inline", "markupsafe"}

    module = ProcessModule(release, max_frame_bytes=1_048_576, ipc_timeout=10.0)
    stopper(module)
    handshake = module.start(introspect=True)
    with open(f"/proc/{module.pid}/cmdline", "rb") as handle:
        assert b"-S" in handle.read().split(b"\0")
    server_site = {*site.getsitepackages(), sysconfig.get_paths()["purelib"]}
    assert not [p for p in handshake["sys_path"] if any(p.startswith(s) for s in server_site)]
    for name, path in handshake["native_files"].items():
        assert path and path.startswith(str(lib)), (name, path)
    module.self_test()  # raises on a failed render
    rendered = module.invoke("render", self_test_input())
    assert rendered["subject"] and "<" in rendered["html"]


def test_a_tampered_lib_is_refused(renderer_releases, tmp_path):
    copy = tmp_path / "releases"
    shutil.copytree(renderer_releases / RENDERER_RELEASES[0], copy / RENDERER_RELEASES[0])
    target = copy / RENDERER_RELEASES[0] / "lib" / "nh3" / "__init__.py"
    os.chmod(target, 0o644)
    target.write_text(target.read_text() + "\n# changed\n")
    with pytest.raises(CandidateRejected, match="lib/ SHA-256"):
        locate_release(copy, RENDERER_RELEASES[0])


def test_build_writes_manifest_matching_the_artifact_and_never_overwrites(
    renderer_releases, tmp_path
):
    from app.modules.build import BuildError, build_renderer_release

    release = renderer_releases / RENDERER_RELEASES[0]
    manifest = json.loads((release / "manifest.json").read_text())
    artifact = (release / "nm-report-render-worker").read_bytes()
    assert manifest["release_id"] == RENDERER_RELEASES[0]
    assert manifest["artifact_sha256"] == hashlib.sha256(artifact).hexdigest()
    again = build_renderer_release(RENDERER_RELEASES[0], tmp_path)
    assert locate_release(tmp_path, RENDERER_RELEASES[0]).directory == again
    with pytest.raises(BuildError, match="immutable"):
        build_renderer_release(RENDERER_RELEASES[0], tmp_path)
    assert os.access(release / "nm-report-render-worker", os.X_OK)


def test_business_error_keeps_the_process(renderer_releases, stopper):
    module = start(renderer_releases, RENDERER_RELEASES[0])
    stopper(module)
    pid = module.pid
    bad = self_test_input()
    bad["template"]["html"] = "{{ ''.__class__ }}"
    with pytest.raises(ModuleError) as caught:
        module.invoke("render", bad)
    assert caught.value.kind is ErrorKind.EXECUTION and not caught.value.retryable
    assert caught.value.code == "template_unsafe"
    assert module.available() and module.pid == pid
    assert module.invoke("render", self_test_input())["subject"].startswith("[netmap]")


def test_oversized_request_frame_is_refused_before_writing_and_keeps_the_process(
    renderer_releases, stopper
):
    module = start(renderer_releases, RENDERER_RELEASES[0], max_frame_bytes=4096)
    stopper(module)
    pid = module.pid
    payload = self_test_input()
    payload["context"]["padding"] = "x" * 5000
    with pytest.raises(ModuleError) as caught:
        module.invoke("render", payload)
    assert caught.value.code == "request_frame_too_large"
    assert caught.value.kind is ErrorKind.EXECUTION
    assert module.available() and module.pid == pid
    assert module.invoke("render", self_test_input())["template_version"] == "self-test-1"


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("corrupt", "corrupt_frame"),
        ("oversized-length", "corrupt_frame"),
        ("wrong-request-id", "identity_mismatch"),
        ("wrong-release", "identity_mismatch"),
        ("exit", "pipe_closed"),
        ("raise", "pipe_closed"),
    ],
)
def test_protocol_faults_kill_and_reap_the_process(renderer_releases, stopper, fault, code):
    module = start(renderer_releases, FAULTY_RELEASE)
    stopper(module)
    pid = module.pid
    assert module.invoke("render", self_test_input())["subject"]  # healthy before
    with pytest.raises(ModuleError) as caught:
        module.invoke("render", faulty_payload(fault))
    assert caught.value.code == code
    assert caught.value.kind is ErrorKind.UNAVAILABLE and caught.value.retryable
    assert not module.available()
    assert module.worker.process.returncode is not None  # reaped, not a zombie
    assert process_gone(pid)
    with pytest.raises(ModuleError) as again:
        module.invoke("render", self_test_input())
    assert again.value.kind is ErrorKind.UNAVAILABLE


def test_ipc_timeout_kills_and_reaps(renderer_releases, stopper):
    module = start(renderer_releases, FAULTY_RELEASE, ipc_timeout=0.5)
    stopper(module)
    pid = module.pid
    with pytest.raises(ModuleError) as caught:
        module.invoke("render", faulty_payload("sleep:30"))
    assert caught.value.code == "ipc_timeout"
    assert process_gone(pid) and module.worker.process.returncode is not None


def test_a_tight_ipc_timeout_still_lets_the_worker_start(renderer_releases, stopper):
    # Starting an interpreter and importing the renderer takes longer than 0.1 s; the
    # per-call timeout applies to calls, the handshake waits for the start-up.
    module = start(renderer_releases, RENDERER_RELEASES[0], ipc_timeout=0.1)
    stopper(module)
    assert module.available()
    assert module.worker.ipc_timeout == 0.1


def test_release_builds_ignore_fault_requests(renderer_releases, stopper):
    module = start(renderer_releases, RENDERER_RELEASES[0])
    stopper(module)
    output = module.invoke("render", faulty_payload("exit"))
    assert output["template_version"] == "fault:exit"
    assert module.available()


def copy_release(source: Path, release_id: str, target_root: Path) -> Path:
    target_root.mkdir(parents=True, exist_ok=True)
    target = target_root / release_id
    shutil.copytree(source / release_id, target)
    for path in (target, *target.iterdir()):
        path.chmod(0o755)
    return target


def rewrite_manifest(directory: Path, **changes) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest.update(changes)
    (directory / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "release_id", ["../renderer-1.0.0", "a/b", "", ".hidden", "x" * 65, "a..b", "white space"]
)
def test_loader_rejects_bad_release_ids(renderer_releases, release_id):
    with pytest.raises(CandidateRejected):
        open_candidate(settings_for(renderer_releases), release_id)


def test_loader_rejects_missing_tampered_and_escaping_releases(renderer_releases, tmp_path):
    root = tmp_path / "releases"
    good = copy_release(renderer_releases, RENDERER_RELEASES[0], root)
    settings = settings_for(root)

    with pytest.raises(CandidateRejected, match="not installed"):
        open_candidate(settings, "renderer-9.9.9")

    # a symlinked release directory pointing outside the releases directory
    outside = copy_release(renderer_releases, RENDERER_RELEASES[1], tmp_path / "elsewhere")
    (root / RENDERER_RELEASES[1]).symlink_to(outside, target_is_directory=True)
    with pytest.raises(CandidateRejected, match="escapes"):
        open_candidate(settings, RENDERER_RELEASES[1])

    # the artifact as a symlink
    linked = root / "renderer-linked"
    linked.mkdir()
    shutil.copy(good / "manifest.json", linked / "manifest.json")
    rewrite_manifest(linked, release_id="renderer-linked")
    (linked / "nm-report-render-worker").symlink_to(good / "nm-report-render-worker")
    with pytest.raises(CandidateRejected, match="regular file"):
        open_candidate(settings, "renderer-linked")

    # digest mismatch
    tampered = copy_release(renderer_releases, RENDERER_RELEASES[0], tmp_path / "t")
    rewrite_manifest(tampered, artifact_sha256="0" * 64)
    with pytest.raises(CandidateRejected, match="SHA-256"):
        open_candidate(settings_for(tmp_path / "t"), RENDERER_RELEASES[0])

    # manifest naming another release, oversized manifest, broken JSON
    rewrite_manifest(good, release_id="renderer-other")
    with pytest.raises(CandidateRejected, match="does not match"):
        open_candidate(settings, RENDERER_RELEASES[0])
    (good / "manifest.json").write_text(json.dumps({"pad": "x" * 5000}))
    with pytest.raises(CandidateRejected, match="exceeds"):
        open_candidate(settings, RENDERER_RELEASES[0])
    (good / "manifest.json").write_text("{not json")
    with pytest.raises(CandidateRejected, match="JSON"):
        open_candidate(settings, RENDERER_RELEASES[0])

    # no releases directory configured at all
    with pytest.raises(CandidateRejected, match="releases_directory"):
        open_candidate(load_settings(env={})[0], RENDERER_RELEASES[0])


def test_loader_runs_the_handshake_before_accepting(tmp_path):
    """An artifact with a valid manifest that does not speak the protocol is rejected."""
    release = tmp_path / "releases" / "not-a-worker"
    release.mkdir(parents=True)
    script = b"import sys\nsys.stdout.write('hello, I am not a worker')\nsys.stdout.flush()\n"
    (release / "nm-report-render-worker").write_bytes(script)
    (release / "manifest.json").write_text(
        json.dumps(
            {"release_id": "not-a-worker", "artifact_sha256": hashlib.sha256(script).hexdigest()}
        )
    )
    with pytest.raises(CandidateRejected, match="worker failed"):
        open_candidate(settings_for(tmp_path / "releases", ipc_timeout_seconds=2), "not-a-worker")


def test_releases_directory_is_relative_to_the_config_file(renderer_releases, tmp_path):
    config_dir = tmp_path / "etc"
    copy_release(renderer_releases, RENDERER_RELEASES[0], config_dir / "modules")
    config = config_dir / "netmap.toml"
    config.write_text('[report_renderer]\nreleases_directory = "modules"\n')
    settings, _ = load_settings(config, env={})
    module = open_candidate(settings, RENDERER_RELEASES[0])
    try:
        assert module.contract().release_id == RENDERER_RELEASES[0]
    finally:
        module.shutdown(timeout=2.0)
