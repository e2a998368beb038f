"""The Kubernetes backend: a job's replicas as objects in its user's namespace.

backend.py    prepare, launch, stop, delete, observe (the Backend interface)
watcher.py    the watcher: a ClusterWatcher per datacenter, syncing the jobs whose objects change
informer.py   watches with resume and relist, and the cluster state they keep
observe.py    replica states of a job from that state; status.py the same for one pod
logs.py       pod logs into the durable per-replica files
runtime.py    runtime images built in the cluster (kaniko); pull.py the credentials pods pull them with
usage.py      CPU and memory of running pods (the metrics API)
hardening.py  pod security and NetworkPolicies; config.py the datacenter's settings
client.py     the API client with retries
manifests.py  a job's objects as plain dicts (pure functions, validated against the OpenAPI schemas)

The local backend (../local/) uses the same names for the same roles. Nothing is imported here:
the registry names backend.KubernetesBackend.
"""
