from celery import shared_task

from . import login_gate, services


@shared_task
def delete_expired_tokens() -> int:
    return services.delete_expired_tokens()


@shared_task
def sweep_login_records() -> int:
    return login_gate.sweep()
