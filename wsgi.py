"""WSGI entry point for gunicorn (Procfile ``web``).

``gunicorn -c python:app.gunicorn_conf wsgi:app``
"""

from app import create_app

app = create_app()
