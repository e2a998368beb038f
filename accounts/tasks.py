from celery import shared_task

from . import services


@shared_task
def delete_expired_tokens() -> int:
    return services.delete_expired_tokens()
