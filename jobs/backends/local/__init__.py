"""The local backend: a job's replicas as sandboxed process groups on this machine.

backend.py    prepare, launch, stop, delete, observe (the Backend interface)
watcher.py    the watcher: each tick observes the keepers' state files and syncs the jobs
keeper.py     the process keeper of one replica (a plain script, no Django)
sandbox.py    bubblewrap, as the user's job uid; netns.py the job's network namespace, egress.py
              its route out; cgroups.py the replica's limits
runtime.py    virtualenvs from the package's requirements.txt, cached by their hash
usage.py      CPU and memory of running replicas (the processes below their keepers)
config.py     the datacenter's settings

The Kubernetes backend (../kubernetes/) uses the same names for the same roles. Nothing is
imported here: the registry names backend.LocalBackend.
"""
