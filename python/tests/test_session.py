"""Synchronization strategies driven by a torch program's own loop (hetsync.Session)."""

from conftest import launch


def test_session_strategies_on_a_torch_model():
    out = launch(3, "session.py")
    assert out.count("session ok") == 3, out
    for sync in ("ssgd", "esync", "wbsp"):
        assert out.count(": %s ok:" % sync) == 3, out
