"""Identity: users and passwords, scanner tokens, audit rows and secrets at rest (IDN)."""
