"""Moving jobs on: a job's state from its backend's observations (sync.py), restarts of failed
replicas (restarts.py), a runtime made in the background (preparing.py), admission from the queue
(queue.py) and the purge of finished jobs (retention.py). Above the backends, which it drives
through their one interface."""
