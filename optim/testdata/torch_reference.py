"""Writes torch_reference.json: torch.optim's SGD, Adam and AdamW on a fixed sequence of
gradients, the reference optim's tests compare each optimizer with.

Regenerate (Debian's python3 with torch 1.13) from the repository root:

    /usr/bin/python3 optim/testdata/torch_reference.py > optim/testdata/torch_reference.json

The initial parameters and the gradients are float32 values drawn from a seeded generator
and written out, so the Go test reads them rather than re-deriving them. The parameters after
the steps in RECORDED and the final state are recorded as the float32 values torch computed,
each as the shortest text that reads back as the same float32.
"""
import sys

import numpy
import torch

N = 37  # more than one 8-wide vector of torch's kernels, and a tail
STEPS = 30
RECORDED = (1, 2, 3, 10, STEPS)  # the steps whose parameters are recorded

CASES = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, weight_decay=0.01)),
    ("sgd", dict(lr=0.05, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.001)),
    ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.5, weight_decay=0.001)),
    ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("sgd", dict(lr=0.05, momentum=0.5, nesterov=True, weight_decay=0.01)),
    ("adam", dict(lr=0.01)),
    ("adam", dict(lr=0.003, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01)),
    ("adam", dict(lr=0.01, betas=(0.0, 0.9))),
    ("adamw", dict(lr=0.01, weight_decay=0.0)),
    ("adamw", dict(lr=0.01, weight_decay=0.05)),
    ("adamw", dict(lr=0.002, betas=(0.95, 0.995), eps=1e-7, weight_decay=0.1)),
]

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def vec(t):
    """A float32 tensor as a JSON array of shortest round-trip float32 texts."""
    return "[" + ",".join(numpy.format_float_scientific(x, unique=True, trim="-") for x in t.detach().reshape(-1).numpy()) + "]"


def obj(fields):
    return "{" + ",".join('"%s":%s' % kv for kv in fields) + "}"


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(31)
    init = torch.randn(N, generator=gen, dtype=torch.float32)
    # Gradients of varied scale, one coordinate always exactly zero, as a model's may be.
    grads = torch.randn(STEPS, N, generator=gen, dtype=torch.float32) * torch.logspace(-3, 0, N)
    grads[:, 5] = 0
    cases = []
    for name, kw in CASES:
        p = init.clone().requires_grad_(True)
        opt = OPTIMIZERS[name]([p], **kw)
        params = []
        for step, g in enumerate(grads, 1):
            p.grad = g.clone()
            opt.step()
            if step in RECORDED:
                params.append((str(step), vec(p)))
        st = opt.state[p]
        state = []
        if st.get("momentum_buffer") is not None:
            state.append(("velocity", vec(st["momentum_buffer"])))
        if "exp_avg" in st:
            state += [("steps", int(st["step"].item())), ("m", vec(st["exp_avg"])), ("v", vec(st["exp_avg_sq"]))]
        settings = dict(kw)
        if "betas" in settings:
            settings["beta1"], settings["beta2"] = settings.pop("betas")
        settings = [(k, repr(v).lower() if isinstance(v, bool) else repr(v)) for k, v in settings.items()]
        cases.append(obj([("optimizer", '"%s"' % name), ("settings", obj(settings)), ("params", obj(params)), ("state", obj(state))]))
    sys.stdout.write(obj([("n", N), ("steps", STEPS), ("init", vec(init)), ("grads", "[" + ",".join(vec(g) for g in grads) + "]"),
                          ("cases", "[\n" + ",\n".join(cases) + "]")]) + "\n")


if __name__ == "__main__":
    main()
