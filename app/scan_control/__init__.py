"""Scan control: targets, task creation and plans, dispatch with leases, queries (SCN)."""
