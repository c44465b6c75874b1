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
