"""A job's recorded state: every change a conditional UPDATE on the current state plus a JobEvent
(transitions.py), new attempts of replicas (attempts.py) and the time spent in each state
(timings.py). Below the backends and the lifecycle, which both call it."""
