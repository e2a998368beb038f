"""The launcher: the only part of PaddleCloud that keeps root, for local jobs.

Everything else (web, Celery worker and beat, the jobs watcher, the bundled Redis) runs as the
service account. The few operations that need root locally go through this small process, on a
unix socket that admits only the service account (SO_PEERCRED), in a fixed vocabulary
(`ops.py`): set up and drop a job's network (a namespace, slirp4netns for its route out), create,
limit and remove a replica's cgroup, hand a working copy or home to a job uid, and start a
replica's keeper inside the sandbox (or a runtime build's). Each request is checked here again
as if it came from an attacker: every path must be a real directory or file below one of the
roots it was started with (opened race-free, never through a symbolic link), every uid must be in
the job range. It imports no Django and reads no database: what it is told is all it knows.

Started by a normal user it runs rootless: the same vocabulary, with user namespaces instead of
root (the job then runs under the service's own uid, isolated by its namespaces alone).
"""
