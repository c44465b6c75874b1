"""Shadow mode's offline comparison scores with the placement the records name: the heuristic, the served ensemble,
or the committed single bundle when the extender served that one; a note when it cannot be the one served."""

from policy.lowlevel import LearnedPlacement, PlacementEnsemble, TopologyHeuristic
from policy.whatif.shadow import policy_for


def records(policy, version=""):
    return [{"policy": policy, "policy_version": version}] * 2


def test_the_scoring_policy_follows_what_the_records_name():
    single = LearnedPlacement.load()
    p, note = policy_for(records("topology-heuristic"))
    assert isinstance(p, TopologyHeuristic) and note == ""
    served, note = policy_for(records("learned"))  # no version recorded: the served default
    assert isinstance(served, PlacementEnsemble) and note == ""
    p, note = policy_for(records("learned", served.version))
    assert isinstance(p, PlacementEnsemble) and note == ""
    p, note = policy_for(records("learned", single.version))  # an operator serving training seed 0 alone
    assert isinstance(p, LearnedPlacement) and p.version == single.version and note == ""
    p, note = policy_for(records("learned", "placement-of-my-own"))
    assert isinstance(p, PlacementEnsemble) and "placement-of-my-own" in note and served.version in note
