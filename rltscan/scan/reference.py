"""The oracle: a plain float64 loop over time, one sequence at a time.

    backward:  y_t = a_t * y_{t+1} + b_t,   y_T    = init (0 by default)
    forward:   y_t = a_t * y_{t-1} + b_t,   y_{-1} = init (0 by default)

Nothing clever on purpose; every fast path is tested against this.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def linear_scan(a: Tensor, b: Tensor, *, reverse: bool, init: Tensor | None = None) -> Tensor:
    """Solve the recurrence for ``[R, T]`` coefficients; float64 ``[R, T]`` on b's device."""
    a64 = a.detach().to("cpu", torch.float64).numpy()
    b64 = b.detach().to("cpu", torch.float64).numpy()
    rows, steps = b64.shape
    y = np.empty((rows, steps), dtype=np.float64)
    carry0 = (
        np.zeros(rows) if init is None else init.detach().to("cpu", torch.float64).numpy().ravel()
    )
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for r in range(rows):
        ar, br, yr = a64[r].tolist(), b64[r].tolist(), [0.0] * steps
        carry = float(carry0[r])
        for t in order:
            carry = ar[t] * carry + br[t]
            yr[t] = carry
        y[r] = yr
    return torch.from_numpy(y).to(b.device)
