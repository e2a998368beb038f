"""Submission: a job's spec checked before anything is created (validation.py, the rules that need
more than one field or the database) and the API's submit serializer derived from jobs/spec.py."""
