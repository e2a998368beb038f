from conftest import make_package
from jobs import services
from jobs.tests.helpers import wait_state


def test_a_job_submitted_through_the_service_runs_to_success(system, alice):
    pkg = make_package(alice, "hello", {"train.py": "print('hi')\n"})
    job = services.submit_job(alice, {"name": "hello", "package": pkg, "entry": "python train.py",
                                      "mode": "collective", "trainers": 1})
    wait_state(job, "Succeeded", 30)
