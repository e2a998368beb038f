import pytest

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
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun

    from paddleweb.celery import app
    from tests.support import close_task_connection

    task_postrun.connect(close_task_connection)
    try:
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=30):
            yield
    finally:
        task_postrun.disconnect(close_task_connection)
