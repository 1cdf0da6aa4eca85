"""The operator's tools: config check, resource sampler, slow SQL, diagnostics, backup.

Everything here answers "what is this deployment doing and is it healthy?"
without a shell on the host (OPS-1..4, OBS-4): the configuration check printed at
start-up and served to admins, host and process resource samples, the slowest
statements from ``pg_stat_statements``, a redacted diagnostics archive, and
backup/restore of the database plus the files netmap keeps on disk.
"""
