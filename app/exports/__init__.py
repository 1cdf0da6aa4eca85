"""Result exports: a task's execution endpoints as CSV, JSON lines or a zip, built by the
runner under a lease into the object store, downloadable until they expire (EXP-7 .. EXP-10)."""
