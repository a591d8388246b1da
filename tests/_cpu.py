"""Shared by the C++ backend's tests (tests/test_cpu_native.py, test_cpu_transform.py,
test_zero_mass.py, ...): the extension itself (importing this module skips the test module when
specops._C is not built), the row counter of the end-of-run summary, seeds from test parameters,
and random logit rows with the sampling settings every level is held to."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from specops import reference as R
from tests._rows import count_rows

_C = pytest.importorskip(
    "specops._C",
    reason="specops._C (the C++ CPU backend) is not built: run `pip install -e .` "
           "(SPECOPS_BUILD_CPP=0 skips it)")

ISAS = _C.available_isas()
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def count(key, n):
    count_rows("cpu_native/" + key, n)


def seed_of(*parts) -> int:
    """A fixed seed from test parameters (zlib.crc32 of their repr: no per-process hash)."""
    return zlib.crc32(repr(parts).encode())


SETTINGS = {  # name: (temperature, top_k, top_p, min_p)
    "greedy": (0.0, 0, 1.0, 0.0),
    "temp0.8": (0.8, 0, 1.0, 0.0),
    "top_k50": (1.0, 50, 1.0, 0.0),
    "top_p0.95": (0.8, 0, 0.95, 0.0),
    "min_p0.05": (0.7, 0, 1.0, 0.05),
    "combined": (0.9, 40, 0.9, 0.02),
    "top_k1": (1.3, 1, 1.0, 0.0),
    "top_k_ge_V": (1.0, 1 << 23, 1.0, 0.0),
    "tiny_top_p": (1.0, 0, 1e-3, 0.0),
    "hot": (3.0, 0, 0.5, 0.0),
    "top_p_zero": (1.0, 0, 0.0, 0.0),     # below the public API's range: keeps the argmax group
    "min_p_gt1": (1.0, 0, 1.0, 1.5),      # masks everything: an all-zero row, draws give -1
}


EXOTIC = ("top_p_zero", "min_p_gt1")


def logit_rows(rng, n, V, dtype, specials=True):
    """n rows of logits with ties, -inf entries and (optionally) invalid rows."""
    x = torch.from_numpy(rng.standard_normal((n, V)).astype(np.float32) * 3)
    kinds = rng.integers(0, 8, size=n)
    for i in range(n):
        k = kinds[i]
        if k == 1:            # heavy ties
            x[i] = torch.round(x[i])
        elif k == 2 and V > 1:  # some -inf entries
            x[i, torch.from_numpy(rng.random(V) < 0.3)] = -float("inf")
            x[i, int(rng.integers(V))] = 1.0
        elif k == 3:          # a flat row (all equal)
            x[i] = 0.5
        elif k == 4:          # large magnitudes (e underflows for most tokens)
            x[i] = x[i] * 30
        elif specials and k == 5:
            x[i, int(rng.integers(V))] = float("nan")
        elif specials and k == 6:
            x[i] = -float("inf")
        elif specials and k == 7:
            x[i, int(rng.integers(V))] = float("inf")
    return x.to(dtype)


def sampling_params(names, n):
    t = np.array([SETTINGS[names[i % len(names)]][0] for i in range(n)], dtype=np.float32)
    return (torch.from_numpy(R.inv_temperature(t)),
            torch.tensor([SETTINGS[names[i % len(names)]][1] for i in range(n)],
                         dtype=torch.int64),
            torch.tensor([SETTINGS[names[i % len(names)]][2] for i in range(n)],
                         dtype=torch.float32),
            torch.tensor([SETTINGS[names[i % len(names)]][3] for i in range(n)],
                         dtype=torch.float32))
