"""Background asset projection: the leased outbox and its page publisher (PRJ)."""
