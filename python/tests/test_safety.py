"""A rank waiting in a collective stays responsive to signals, and stopping the job stops every
rank with its Python cleanup run."""

import os
import signal

from conftest import TIMEOUT, launch, start, stop


def test_interrupt_and_stop_during_a_collective(tmp_path):
    p = start(2, "signals.py", str(tmp_path / "interrupted"))
    try:
        out, waiting = [], set()
        for line in p.stdout:
            out.append(line)
            for r in (0, 1):
                if "rank %d: waiting" % r in line:
                    waiting.add(r)
            if waiting == {0, 1}:
                break
        assert waiting == {0, 1}, "".join(out)
        # Ctrl-C of the launcher: it stops the ranks with SIGTERM.
        os.killpg(p.pid, signal.SIGINT)
        rest, _ = p.communicate(timeout=TIMEOUT)
        out = "".join(out) + rest
    finally:
        stop(p)
    assert "rank 0: KeyboardInterrupt during barrier" in out, out
    for r in (0, 1):
        assert "rank %d: cleanup" % r in out, out
    assert p.returncode != 0, out


def test_ranks_that_end_without_finalize_leave_the_job():
    # Ranks 1 and 2 end right after their first collective, leaving at exit; rank 0 stays in
    # the job until their processes are gone and some heartbeats longer. A rank that left is
    # not a failure: no peer is reported as one that exited without closing.
    out = launch(3, "leave.py")
    assert out.count("left") == 3, out
    assert "peer failed" not in out and "ERROR" not in out, out
