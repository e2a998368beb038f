"""Reports (as a skip) when paddlectl's SDK libraries are missing and its SDK/CLI tests were left out."""

import pytest

from .conftest import DEPS_MISSING


def test_sdk_libraries_are_installed():
    if DEPS_MISSING:
        pytest.skip(f"paddlectl's SDK and CLI tests were not collected: {', '.join(DEPS_MISSING)} missing "
                    "(pip install -r client/requirements-test.txt)")
