"""The fast "is the schema at head?" answer agrees with Alembic's own (start-up of CLI commands)."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from app import migrations


def test_head_revisions_read_from_the_scripts_equal_alembics_heads():
    script = ScriptDirectory.from_config(migrations.alembic_config())
    heads = migrations.head_revisions()
    assert heads and heads == set(script.get_heads())
    assert len(list(migrations.VERSIONS.glob("*.py"))) >= len(list(script.walk_revisions()))
