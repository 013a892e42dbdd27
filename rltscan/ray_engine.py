"""``--engine ray``: the shard tasks of :mod:`rltscan.shards` as Ray Data tasks.

The only module that imports ray (lazily, so ``import rltscan`` and the
single-machine path never do). Each pass is one Ray Data pipeline,
``from_items(one row per shard).map(run_task)``, one block (hence one task) per
shard; the task is :func:`rltscan.shards.run_task`, the function the local engine
calls, so the outputs are the same bit for bit. Tasks ask Ray for one GPU each
when the cluster has GPUs (unless ``--device cpu``), one CPU otherwise; ``workers``
caps how many run at once. Every node must have rltscan installed and see the
dataset (and its staging directory) at the same path, e.g. on a shared filesystem.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import warnings
from typing import Any

from rltscan.errors import BackendUnavailableError

INSTALL = "pip install 'rltscan[ray]'"


def _task(row: dict[str, Any], job: Any) -> dict[str, Any]:
    from rltscan.shards import run_task

    return run_task(job, json.loads(row["item"]))


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__


class RayEngine:
    """Connects to (or starts) a Ray cluster; ``map`` runs one task per item."""

    name = "ray"

    def __init__(self, *, address: str | None, workers: int | None, device: str) -> None:
        try:
            import ray
            import ray.data
        except ImportError:
            raise BackendUnavailableError(
                f"--engine ray needs Ray Data, which is not installed; {INSTALL}"
            ) from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            init: dict[str, Any] = dict(
                include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True
            )
            if address:
                init["address"] = address
            elif workers:
                init["num_cpus"] = workers
            try:
                ray.init(**init)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise BackendUnavailableError(
                    f"cannot start or join a Ray cluster at {address or 'this machine'} "
                    f"({_first_line(err)}); check --ray-address or start one with `ray start`"
                ) from None
            self.started = True
        gpus = float(ray.cluster_resources().get("GPU", 0))
        if device.startswith("cuda") and gpus < 1:
            raise BackendUnavailableError(
                f"--device {device} with --engine ray but the Ray cluster has no GPU; "
                "pass --device cpu"
            )
        self.num_gpus = 1 if gpus >= 1 and device != "cpu" else 0
        # a task without a GPU computes on the CPU, whatever the node has
        self.device = device if self.num_gpus else "cpu"
        self.workers = workers
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        context = ray.data.DataContext.get_current()
        if hasattr(context, "enable_progress_bars"):
            context.enable_progress_bars = False

    def map(self, job: Any, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run :func:`rltscan.shards.run_task` on every item, one Ray task each."""
        ray = self.ray
        if not items:
            return []
        if job.device != self.device:
            job = dataclasses.replace(job, device=self.device)
        rows = [{"item": json.dumps(item)} for item in items]
        blocks = len(rows)
        if "override_num_blocks" in inspect.signature(ray.data.from_items).parameters:
            ds = ray.data.from_items(rows, override_num_blocks=blocks)
        else:  # Ray < 2.10
            ds = ray.data.from_items(rows, parallelism=blocks)
        kwargs: dict[str, Any] = {"fn_kwargs": {"job": job}, "num_cpus": 1}
        if self.num_gpus:
            kwargs["num_gpus"] = self.num_gpus
        if self.workers:
            if hasattr(ray.data, "TaskPoolStrategy"):
                kwargs["compute"] = ray.data.TaskPoolStrategy(size=self.workers)
            else:  # older Ray Data
                kwargs["concurrency"] = self.workers
        with warnings.catch_warnings():  # Ray Data's own deprecations, not the user's
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(ds.map(_task, **kwargs).take_all())

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
