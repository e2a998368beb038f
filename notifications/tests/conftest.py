import pytest

from tests.support import running_system

from .receiver import receiver


@pytest.fixture
def allow_private(settings):
    """The tests' receivers listen on loopback, which webhooks may reach only when allowed."""
    settings.WEBHOOK_ALLOW_PRIVATE = True
    settings.WEBHOOK_RETRY_BACKOFF = 0.2
    return settings


@pytest.fixture
def hook_receiver(allow_private):
    with receiver() as r:
        yield r


@pytest.fixture
def worker(transactional_db):
    """A real Celery worker in threads of this process (no jobs watcher: the tests move jobs)."""
    with running_system(watcher=False):
        yield
