"""`netmap search …`: moving a PostgreSQL store's history into Elasticsearch (ING-11).

An operations command beside backup and restore: it drives the search store's copy
(``app.search.migrate``) and then the projection's requeue, two domains that must not
import each other."""

from __future__ import annotations

import json
import sys

import click


@click.group("search")
def search() -> None:
    """Search store maintenance."""


@search.command("migrate")
@click.option(
    "--to",
    "target",
    type=click.Choice(["elasticsearch"]),
    required=True,
    help="The store to copy the PostgreSQL store's history into.",
)
@click.option("--es-url", help="The cluster (default [elasticsearch] url).")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 10000),
    default=1000,
    show_default=True,
    help="Documents per page read and per bulk write.",
)
@click.option("--restart", is_flag=True, help="Forget the checkpoint and copy from the start.")
@click.pass_obj
def migrate(state, target: str, es_url: str | None, batch_size: int, restart: bool) -> None:
    """Copy facts and execution endpoints into Elasticsearch; resumable; counts checked.

    Progress goes to stderr, one JSON summary to stdout; exit 1 when counts differ.
    """

    from app.cli_support import database_for_command
    from app.projection.outbox import requeue_processed
    from app.search.elasticsearch_store import ElasticsearchStore
    from app.search.migrate import MigrationError, migrate_to_elasticsearch
    from app.search.postgres_store import PostgresStore

    settings = state.settings()
    es = settings.elasticsearch
    if es_url:
        es = es.replace(url=es_url)
    if not es.url:
        raise click.UsageError("no cluster: set [elasticsearch] url or pass --es-url")
    with database_for_command(settings):
        source = PostgresStore(settings)
        destination = ElasticsearchStore(es)
        try:
            result = migrate_to_elasticsearch(
                source,
                destination,
                batch_size=batch_size,
                restart=restart,
                progress=lambda message: click.echo(f"migrate: {message}", err=True),
                when_finished=requeue_processed,
            )
        except MigrationError as exc:
            raise click.ClickException(str(exc)) from None
        finally:
            destination.close()
            source.close()
    click.echo(json.dumps(result.as_dict()))
    if result.mismatches:
        sys.exit(1)
