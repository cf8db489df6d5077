"""The job's torch.distributed store: the "hetsync" backend's env:// rendezvous over it, with
no TCPStore and no port for torch, and Gloo under `hetsync launch` on torch's own store."""

from conftest import launch


def test_store_rendezvous_and_torch_idioms():
    out = launch(3, "store.py")
    assert out.count("store ok") == 3, out
    assert out.count("wait timed out") == 3, out
