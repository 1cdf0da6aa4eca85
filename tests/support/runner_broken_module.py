"""A module that cannot be imported: stands for job code with a broken import."""

from app.this_module_does_not_exist import anything  # noqa: F401
