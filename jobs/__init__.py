"""The job runner (`netmap runner`): worker processes that claim leased work from PostgreSQL."""
