"""Shared by every test directory: with pytest's default ``prepend`` import mode, loading this file puts
``tests/`` on ``sys.path``, so helpers here (``waiting.wait_until``) import as top-level modules."""

# Property-based tests (hypothesis): one bounded, reproducible profile for `make test` (a few thousand examples in
# all, no example database written into the tree); `HYPOTHESIS_PROFILE=explore` draws fresh random examples.
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False)
settings.load_profile(__import__("os").environ.get("HYPOTHESIS_PROFILE", "ci"))


import logging  # noqa: E402 - after the profile, which must load first

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _root_logging_restored():
    """A command's ``main()`` run in a test (policy.telemetry.configure_logging) replaces the root logger's handler
    with one writing to that test's captured stderr, which pytest closes when the test ends; a server thread that
    logs later would print a "Logging error" traceback into a passing run. Each test leaves the root logger's
    handlers and level as it found them."""
    root = logging.getLogger()

    def ours(hs):  # pytest adds and removes its own capture handlers around every phase: not ours to touch
        return [h for h in hs if not type(h).__module__.startswith("_pytest")]

    handlers, level = ours(root.handlers), root.level
    yield
    for h in ours(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)
