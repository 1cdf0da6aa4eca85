"""Result ingest: the scanner upload protocol with receipts, streams, finals and freshness (ING)."""
