"""Makes client/tests importable as client.tests in the repo-wide test run (no runtime role)."""
