"""The scanner agent and the result-file parsers it shares with the importers (AGT).

``netmap agent`` (or ``python -m app.agent``) claims executions from a netmap
server, runs nmap or masscan (or resolves domains), and uploads the results
with the upload protocol's exactly-once guarantees. The package imports no
Flask, SQLAlchemy, psycopg2 or Elasticsearch code, so it can be installed on a
scan host on its own; the server-side importer service reuses only its parsers.
"""
