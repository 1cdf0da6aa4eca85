"""`netmap bench …`: performance measurements on scratch data, printed as one JSON object (PRF)."""
