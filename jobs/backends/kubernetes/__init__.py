"""The Kubernetes backend: a job's replicas as objects in its user's namespace.

backend.py    prepare, launch, stop, delete, observe (the Backend interface)
context.py    the narrow view of a datacenter's cluster that every part below takes
layouts/      workload shapes, one per module behind one interface: plain (StatefulSet + Indexed
              Job), jobset (one JobSet); gang.py the gang schedulers' add-ons (Volcano, Kueue)
setup.py      a user's namespace, quota, policies and copied Secrets; root.py a job's root object
watcher.py    the watcher: a ClusterWatcher per datacenter, syncing the jobs whose objects change
informer.py   watches with resume and relist, and the cluster state they keep
observe.py    replica statuses (facts for the lifecycle) of a job from that state; status.py of one pod
logs.py       pod logs into the durable per-replica files
runtime.py    runtime images built in the cluster (kaniko); pull.py the credentials pods pull with
usage.py      CPU and memory of running pods (the metrics API), sampled on a thread of its own
hardening.py  pod security and NetworkPolicies; config.py the datacenter's settings
client.py     the API client with retries; discovery.py whether the cluster has a gang scheduler
manifests.py, workloads.py   a job's objects as plain dicts (pure, validated against the schemas)

The local backend (../local/) uses the same names for the same roles. Nothing is imported here:
the registry names backend.KubernetesBackend.
"""
