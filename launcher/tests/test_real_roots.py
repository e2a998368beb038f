"""The service account owns its state directory, where the roots lie by default: it could leave a
root as a link to /etc for the next start as root. Root parts open them through no link
(launcher.paths.open_real_dir); tests/test_supervision.py starts the whole tree so."""

from __future__ import annotations

import os

import pytest

from launcher.paths import Refused, Roots, open_real_dir


def test_a_root_reached_through_a_link_anywhere_on_its_way_is_refused(tmp_path):
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (tmp_path / "var").mkdir()
    os.symlink(elsewhere, tmp_path / "var" / "logs")  # as the service account could
    os.symlink(tmp_path / "var", tmp_path / "var-link")
    for path in (tmp_path / "var" / "logs", tmp_path / "var-link" / "pfs"):
        with pytest.raises(Refused, match="symbolic link"):
            open_real_dir(str(path), make=True)
    with pytest.raises(Refused, match="symbolic link"):
        Roots(pfs=str(tmp_path / "var"), logs=str(tmp_path / "var" / "logs"))
    assert os.listdir(elsewhere) == []


def test_missing_levels_of_a_root_are_made_and_the_root_opened(tmp_path):
    fd = open_real_dir(str(tmp_path / "var" / "jobs"), os.O_RDONLY, make=True)
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path / "var" / "jobs"))
    finally:
        os.close(fd)
    with pytest.raises(Refused, match="No such file"):
        open_real_dir(str(tmp_path / "var" / "none"))
    with pytest.raises(Refused, match="normalised"):
        open_real_dir(str(tmp_path / "var" / ".." / "var"))
