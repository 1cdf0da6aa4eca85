"""``python -m app`` is the same as the ``netmap`` console script."""

from app.cli import main

main()
