"""`netmap modules …`: building renderer releases and looking at the applied selection."""

from __future__ import annotations

import json
from pathlib import Path

import click

from app.modules.errors import CandidateRejected


@click.group()
def modules() -> None:
    """Report renderer modules (releases built separately from the server)."""


@modules.command("build-renderer")
@click.option("--release-id", required=True, help="Immutable release id, e.g. renderer-1.0.0.")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Releases directory to write DIR/RELEASE_ID into.",
)
def build_renderer(release_id: str, out_dir: Path) -> None:
    """Write OUT/RELEASE_ID/manifest.json and OUT/RELEASE_ID/nm-report-render-worker."""
    from app.modules.build import BuildError, build_renderer_release

    try:
        target = build_renderer_release(release_id, out_dir)
    except (BuildError, CandidateRejected) as exc:
        raise click.ClickException(str(exc)) from None
    manifest = json.loads((target / "manifest.json").read_text())
    click.echo(
        json.dumps(
            {
                "release_id": manifest["release_id"],
                "artifact_sha256": manifest["artifact_sha256"],
                "directory": str(target),
            }
        )
    )
