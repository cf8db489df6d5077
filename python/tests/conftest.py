"""Helpers of the Python tests: they launch real ranks with `hetsync launch`, as users do."""

import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON = sys.executable
# A rank that hangs fails its test after this long instead of hanging the suite.
TIMEOUT = 240


def hetsync_bin():
    b = os.environ.get("HETSYNC_BIN", os.path.join(ROOT, "bin", "hetsync"))
    if not os.path.exists(b):
        pytest.fail("%s is missing: run `make build` (make python-test does)" % b)
    return b


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.pop("HETSYNC_PYTHON_JOINED", None)
    # Each rank is one of several processes on a small machine: one thread each for torch.
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def launch_cmd(np, script, *args):
    return [hetsync_bin(), "launch", "-np", str(np), "--", PYTHON, os.path.join(HERE, "ranks", script)] + list(args)


def launch(np, script, *args):
    """Runs script on np ranks and returns its output; fails the test, with the output, when
    the job fails or outlives TIMEOUT."""
    p = start(np, script, *args)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        stop(p)
        out, _ = p.communicate()
        pytest.fail("hetsync launch -np %d %s still running after %ds:\n%s" % (np, script, TIMEOUT, out))
    assert p.returncode == 0, "hetsync launch -np %d %s failed (%d):\n%s" % (np, script, p.returncode, out)
    return out


def run_alone(script, *args):
    """Runs script as a process that no launcher started (a job of one rank)."""
    p = subprocess.run([PYTHON, os.path.join(HERE, "ranks", script)] + list(args), env=env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    assert p.returncode == 0, "%s failed (%d):\n%s" % (script, p.returncode, p.stdout)
    return p.stdout


def start(np, script, *args):
    """Starts script on np ranks, its output a pipe, in a session of its own (the test signals it)."""
    return subprocess.Popen(launch_cmd(np, script, *args), env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
