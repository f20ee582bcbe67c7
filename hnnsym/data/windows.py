"""Training and validation windows: stretches of observed trajectories, time-major like
``integrate``."""

from __future__ import annotations

import torch
from torch import Tensor

from hnnsym.errors import DataError


def window_times(
    observed: Tensor, window: int, batch_index: Tensor, generator: torch.Generator
) -> Tensor:
    """The observation indices (B, window+1) of one window per trajectory ``batch_index[b]`` of
    ``observed`` (N, T+1, 2d): s, ..., s + window from a uniform random start s in [0, T - window].

    Starts are drawn on ``generator``'s device, one per trajectory, in batch order.
    """
    _check_window(observed, window)
    steps = observed.shape[1] - 1
    starts = torch.randint(
        0, steps - window + 1, (batch_index.shape[0],), generator=generator, device=generator.device
    ).to(observed.device)
    return starts[:, None] + torch.arange(window + 1, device=observed.device)


def _check_window(observed: Tensor, window: int) -> None:
    steps = observed.shape[1] - 1
    if int(window) != window or window < 1:
        raise DataError(f"the window must be a whole number of steps >= 1, got {window}")
    if window > steps:
        raise DataError(
            f"a window of {window} steps needs trajectories of at least {window + 1} observations, "
            f"the data have {steps + 1}; use a shorter window or regenerate with "
            f"generate.train_steps>={window}"
        )


def take_windows(observed: Tensor, batch_index: Tensor, times: Tensor) -> Tensor:
    """The states ``observed[batch_index[b], times[b, t]]`` as (window+1, B, 2d), time-major."""
    rows = batch_index.to(observed.device)[:, None]
    return observed[rows, times].transpose(0, 1).contiguous()


def random_windows(
    observed: Tensor, window: int, batch_index: Tensor, generator: torch.Generator
) -> Tensor:
    """For each trajectory ``batch_index[b]`` of ``observed`` (N, T+1, 2d), the window+1 states from
    a uniform random start (``window_times``): (window+1, B, 2d), time-major like ``integrate``."""
    times = window_times(observed, window, batch_index, generator)
    return take_windows(observed, batch_index, times)


def strided_windows(observed: Tensor, window: int, stride: int) -> Tensor:
    """Every window of ``observed`` (N, T+1, 2d) that starts at 0, stride, 2·stride, ... and ends by
    T: (window+1, N·S, 2d), time-major, trajectory by trajectory (S = ⌊(T − window)/stride⌋ + 1).
    A fixed, seed-free set that covers each trajectory, unlike one random window per trajectory."""
    _check_window(observed, window)
    if int(stride) != stride or stride < 1:
        raise DataError(f"the window stride must be a whole number of steps >= 1, got {stride}")
    steps = observed.shape[1] - 1
    starts = torch.arange(0, steps - window + 1, stride, device=observed.device)
    n = observed.shape[0]
    times = (starts[:, None] + torch.arange(window + 1, device=observed.device)).repeat(n, 1)
    rows = torch.arange(n, device=observed.device).repeat_interleave(starts.shape[0])
    return take_windows(observed, rows, times)
