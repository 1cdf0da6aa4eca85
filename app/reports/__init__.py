"""Reports (REP-1..7): definitions, templates, the three-phase generation pipeline, mail delivery.

``definitions`` validates and stores what an owner wants reported;
``records`` owns the reports, their generation jobs (under a lease) and the
delivery rows; ``capture`` / ``charts`` / ``pipeline`` are the three phases of
one report; ``delivery`` sends the archived mail over SMTP or into the outbox.
"""
