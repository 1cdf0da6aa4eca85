"""The pure report-mail renderer (REP-2): template + fixed context in, subject + HTML out.

This package is built twice: it runs in-process as the ``builtin`` release and,
unchanged, inside the separately built worker (``netmap modules
build-renderer``). So it imports only the standard library, Jinja2, MarkupSafe,
nh3 and css-inline, and refers to its own modules relatively; it never touches
the database, mail or the rest of the application.
"""
