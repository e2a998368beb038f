"""The local backend: a job's replicas as sandboxed process groups on this machine.

backend.py    prepare, launch, stop, delete, observe (the Backend interface)
watcher.py    the watcher: each tick observes the keepers' state files and syncs the jobs
replicas.py   starting one replica: its working copy, /tmp, environment and keeper
keepers.py    a keeper (launcher/keeper.py) as the service sees it: alive, its status, stopping it
sandbox.py    what the launcher can enforce here, and the job uid of a user
launcher_client.py  the requests to the launcher (launcher/), which does all that needs root
runtime.py    virtualenvs from the package's requirements.txt, cached by their hash
usage.py      CPU and memory of running replicas (the processes below their keepers)
config.py     the datacenter's settings

The Kubernetes backend (../kubernetes/) uses the same names for the same roles. Nothing is
imported here: the registry names backend.LocalBackend.
"""
