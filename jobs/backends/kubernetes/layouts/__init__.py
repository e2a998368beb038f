"""Workload shapes, one per module, behind one interface (base.Layout); the datacenter's layout
is chosen once, from its settings:

plain.py    StatefulSet + Indexed Job + headless Services: nothing but Kubernetes (the default,
            and with gang_scheduler volcano, whose add-on adds the PodGroup)
jobset.py   one JobSet per attempt: with gang_scheduler kueue (Kueue admits it as one workload)
"""

from __future__ import annotations

from ..config import K8sSettings
from ..gang import KUEUE, for_settings
from .base import Layout
from .jobset import JobSetLayout
from .plain import Plain


def layout_for(settings: K8sSettings) -> Layout:
    gang = for_settings(settings)
    return (JobSetLayout if settings.gang_scheduler == KUEUE else Plain)(settings, gang)


__all__ = ["JobSetLayout", "Layout", "Plain", "layout_for"]
