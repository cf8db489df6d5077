"""Run directories of Python session runs: `hetsync launch --out` and a session's out= setting
write what `hetsync train` writes, with the heterogeneity recorded and applied, and `hetsync
report` reads them."""

import json
import os
import subprocess

import pytest

from conftest import HERE, PYTHON, TIMEOUT, env, hetsync_bin, stop

RANKS = 3


def run(args):
    """Runs args and returns its output; fails the test, with the output, when it fails or
    outlives TIMEOUT (its ranks stopped with it)."""
    p = subprocess.Popen(args, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        stop(p)
        out, _ = p.communicate()
        pytest.fail("%s still running after %ds:\n%s" % (" ".join(args), TIMEOUT, out))
    assert p.returncode == 0, "%s failed (%d):\n%s" % (" ".join(args), p.returncode, out)
    return out


def load(run_dir):
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rounds = [json.loads(line) for line in f]
    with open(os.path.join(run_dir, "eval.jsonl")) as f:
        evals = [json.loads(line) for line in f]
    return config, summary, rounds, evals


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pyrun")
    a, b = str(tmp / "esync-run"), str(tmp / "ssgd-run")
    script = os.path.join(HERE, "ranks", "pyrun.py")
    out = run([hetsync_bin(), "launch", "-np", str(RANKS), "--out", a, "--timeline", str(tmp / "trace.json"), "--",
               PYTHON, script, b])
    assert out.count("esync ok") == RANKS and out.count("ssgd ok") == RANKS and out.count("refused") == RANKS, out
    return tmp, a, b, script


def test_launch_out_records_the_session(runs):
    _, a, b, script = runs
    config, summary, rounds, evals = load(a)
    assert config["strategy"] == "esync" and config["ranks"] == RANKS, config
    assert config["slowdown"] == [1, 1, 3] and config["slowdown_base"] == 3000000, config
    assert config["program"][-2:] == [script, b], config["program"]
    assert "slowdown=1,1,3" in config["settings"], config["settings"]
    assert summary["ranks"] == RANKS and summary["rounds"] == 8 and "ended_early" not in summary, summary
    assert summary["evaluations"] == 8 == len(evals), (summary, evals)
    assert [e["round"] for e in evals] == list(range(1, 9)), evals
    assert len(rounds) == RANKS * 8, rounds
    for r in rounds:
        assert r["samples"] == 16 * r["local_steps"] and r["loss"] > 0 and 0 <= r["train_acc"] <= 1, r
        if r["rank"] == 2:
            # Slowdown 3 over a 3 ms base: every local step of rank 2 takes at least 9 ms.
            assert r["compute_s"] >= 0.009 * r["local_steps"], r
        assert ("accuracy" in r) == (r["rank"] == 0), r


def test_session_out_records_step_sleep_and_stragglers(runs):
    _, _, b, _ = runs
    config, summary, rounds, _ = load(b)
    assert config["strategy"] == "ssgd" and config["step_sleep"] == [0, 0, 4000000], config
    assert config["stragglers"]["ranks"] == [1] and config["stragglers"]["mode"] == "network", config
    assert summary["ranks"] == RANKS and summary["rounds"] == 5, summary
    assert len(rounds) == RANKS * 5, rounds
    for r in rounds:
        if r["rank"] == 2:
            assert r["compute_s"] >= 0.004, r
        if r["rank"] == 0:
            # Rank 1's messages leave 25 ms late, and rank 0's allreduce waits for them.
            assert r["comm_s"] + r["wait_s"] >= 0.025, r


def test_timeline_has_the_rounds(runs):
    tmp = runs[0]
    for rank in range(RANKS):
        with open(str(tmp / ("trace.rank%d.json" % rank))) as f:
            events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        rounds = [e for e in events if e.get("name") == "round"]
        # 8 esync rounds, then 5 ssgd rounds.
        assert len(rounds) == 13, "rank %d: %d round spans" % (rank, len(rounds))


def test_report_reads_session_runs(runs):
    tmp, a, b, _ = runs
    rep = str(tmp / "report")
    out = run([hetsync_bin(), "report", a, b, "--out", rep])
    with open(os.path.join(rep, "report.md")) as f:
        md = f.read()
    assert "esync-run" in md and "ssgd-run" in md, md
    assert "wrote" in out, out
