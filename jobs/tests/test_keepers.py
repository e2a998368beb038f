"""A keeper's state files as the service reads them, as a crash can leave them."""

from __future__ import annotations

from jobs.backends.local import keepers
from jobs.models import ReplicaState


def test_an_empty_pid_file_reads_as_a_keeper_lost(tmp_path):
    """The keeper writes its pid without fsync (launcher/keeper_main.py): after a crash the file may be
    there but empty, and no keeper runs any more."""
    (tmp_path / "keeper.pid").write_text("")
    (tmp_path / "child.pid").write_text("")
    found = keepers.status(tmp_path, 0)
    assert (found.state, found.reason) == (ReplicaState.FAILED, "Lost")
    assert keepers.live(tmp_path) is None
