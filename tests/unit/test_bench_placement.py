"""python -m policy.bench.placement: the served ensemble is timed and compared beside the single bundles, and the
section names its members."""

from policy.bench.placement import _section, inference_latency
from policy.bundle import SERVED_PLACEMENT_BUNDLE
from policy.lowlevel import LearnedPlacement, load_placement
from policy.sim.placement import compare


def test_the_served_ensemble_is_timed_compared_and_named_by_its_members():
    single, served = LearnedPlacement.load(), load_placement(SERVED_PLACEMENT_BUNDLE)
    bundles = {"learned": single, "learned-ensemble": served}
    lat = {k: {n: inference_latency(v, candidates=n, calls=5) for n in (8, 16)} for k, v in bundles.items()}
    assert lat["learned-ensemble"][16]["candidates"] == 16 and lat["learned-ensemble"][8]["p50_ms"] > 0
    table = compare(["online-boutique"], [0], minutes=2, learned=bundles, settings=("bench",))
    assert [r["policy"] for r in table["rows"]] == ["default", "+heuristic", "+learned", "+learned-ensemble"]
    text = _section(table, lat, bundles)
    assert "| learned-ensemble | 16 |" in text and "| learned | 8 |" in text
    assert all(f"`{m.version}`" in text for m in served.members) and "the mean logit of 3 members" in text
