import hashlib
import hmac

from jobs.models import Job


def make_job(user, datacenter, name="fit", state="Running") -> Job:
    return Job.objects.create(user=user, datacenter=datacenter, name=name, state=state, mode="ps", pservers=1,
                              trainers=1, package=f"/pfs/local/home/{user.username}/pkg", entry="python train.py")


def expected_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Computed here as a receiver would, independently of notifications.delivery."""
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
