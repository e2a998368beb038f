"""What viewers see while a job runs: the durable per-replica logs (logstore.py) and their
followers (logfollow.py), pushes to each job's Channels group (notify.py) and its websocket
consumer (consumers.py), training metrics from the logs (metrics.py), CPU and memory samples
(usage.py)."""
