"""Every collective and dtype against torch's reference, on communicators of 1 to 5 ranks."""

from conftest import launch, run_alone


def test_alone_one_rank_job_and_signal_handlers():
    assert "alone ok" in run_alone("alone.py")


def test_collectives_1_to_5_ranks():
    out = launch(5, "collectives.py")
    assert out.count("collectives ok") == 5, out


def test_ddp_replicas_identical_and_match_one_process():
    out = launch(3, "ddp.py")
    assert out.count("ddp ok") == 3, out
    assert out.count("forked child refused") == 3 and out.count("spawned child refused") == 3, out


def test_backend_calls_asynchronous_and_errors_raised(tmp_path):
    out = launch(2, "backend_async.py", str(tmp_path / "entered"))
    assert out.count("backend async ok") == 2, out
    for r in (0, 1):
        assert "rank %d: python path: HetsyncError" % r in out and "rank %d: c++ path: HetsyncError" % r in out, out
