"""Synchronization strategies driven by a torch program's own loop (hetsync.Session)."""

from conftest import launch

STRATEGIES = ("ssgd", "esync", "wbsp", "local-sgd", "wbsp-opt", "sync-switch", "wbsp-ps", "wbsp-opt-ps",
              "asgd", "dcasgd", "ssp", "ssp-lazy", "local")


def test_every_strategy_on_a_torch_model():
    out = launch(3, "session.py")
    assert out.count("session ok") == 3, out
    for label in STRATEGIES:
        assert out.count(": %s ok:" % label) == 3, out
