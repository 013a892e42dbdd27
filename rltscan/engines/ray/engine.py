"""``--engine ray``: the shard tasks of :mod:`rltscan.engines.shards.task` as Ray tasks.

The only module that imports ray (lazily, so ``import rltscan`` and the
single-machine path never do). Each pass submits one plain Ray task per shard, at most
``workers`` in flight (all of them without), and collects each result as it arrives;
the task is :func:`rltscan.engines.shards.task.run_task`, the function the local
engine calls, so the outputs are the same bit for bit. Every task asks Ray for one CPU;
when the cluster has GPUs (unless ``--device cpu``) it also asks for a share of a
GPU, ``GPUs / concurrent tasks`` (at most 1), so that several tasks share one GPU:
on a node of 16 CPUs and one GPU, ``--workers 16`` runs 16 tasks at 1/16 GPU each
(a shard task is bound by Parquet decoding and the rewrite on the host, not by the
scan, so one task per GPU would leave the GPU idle and the node's cores unused).
Every node must have rltscan installed and see the dataset (and its staging
directory) at the same path, e.g. on a shared filesystem.

Measured and removed: one Ray Data pipeline per pass (``from_items(one row per
shard).map(run_task)`` with a task pool of ``workers``). It was the default until
2026-12-06. On the 16-core H200 node, 16 CPU workers ran 10^9 steps at 24.0M
steps/s with it and 28.3M with plain tasks; 16 GPU-sharing workers ran at 29.0M
against 36.8M; at 8 workers the two were within run-to-run noise (19.7M and 18.4M;
``bench/results/ray-scaling-h200-2026-12-03/``). On the 2-core dev VM, 2 workers
over 8 shards of 5·10^5 steps ran at 0.6M against 1.5M steps/s: the Data pipeline
kept 0.6 of its 2 slots busy in pass 1, and it took 70-90 ms to reach its first
task, where plain tasks took 10 ms. Shard tasks pass only a JSON row in and a small
dict out, so Ray Data's block streaming had nothing to carry.

Each result row also carries the task's wall-clock start and end, its process CPU
seconds and the worker's pid (``RayEngine.last_rows`` keeps the last pass's rows),
which is what ``bench/ray_scaling.py`` reads to place the time of a pass.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

from rltscan.errors import BackendUnavailableError

INSTALL = "pip install 'rltscan[ray]'"


def _task(row: dict[str, Any], job: Any, task: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    t0, cpu0 = time.time(), time.process_time()
    out = task(job, json.loads(row["item"]))
    # one task at a time per worker process, so the process's CPU time is the task's
    out["t0"], out["t1"] = t0, time.time()
    out["cpu"], out["pid"] = time.process_time() - cpu0, os.getpid()
    return out


def gpu_share(gpus: float, concurrent: int) -> float:
    """The GPU a task asks for: an even share of the cluster's GPUs among the tasks
    that run at once, at most one GPU, rounded down to Ray's 1e-4 resolution."""
    if gpus <= 0:
        return 0.0
    share = gpus / max(1, concurrent)
    return 1.0 if share >= 1 else max(1e-4, math.floor(share * 1e4) / 1e4)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:160] if text else type(err).__name__


class RayEngine:
    """Connects to (or starts) a Ray cluster; ``map`` runs one task per item."""

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None,
        workers: int | None,
        device: str,
        task: Callable[..., dict[str, Any]],
    ) -> None:
        self.task = task  # the shard task: passed in, so this module imports no engine
        try:
            import ray
        except ImportError:
            raise BackendUnavailableError(
                f"--engine ray needs Ray, which is not installed; {INSTALL}"
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
        cpus = int(ray.cluster_resources().get("CPU", 1))
        use_gpu = gpus >= 1 and device != "cpu"
        # several tasks share a GPU: each asks for GPUs / (tasks at once), at most 1
        self.num_gpus = gpu_share(gpus, min(workers or cpus, cpus)) if use_gpu else 0.0
        self.last_rows: list[dict[str, Any]] = []
        # a task without a GPU computes on the CPU, whatever the node has
        self.device = device if self.num_gpus else "cpu"
        self.workers = workers

    def map(
        self,
        job: Any,
        items: list[dict[str, Any]],
        on_done: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Run the task (:func:`rltscan.engines.shards.task.run_task`) on every item, one
        Ray task each, at most ``workers`` in flight; ``on_done(row)`` as each one's
        result arrives."""
        ray = self.ray
        if not items:
            return []
        if job.opts.device != self.device:
            job = dataclasses.replace(job, opts=job.opts.replace(device=self.device))
        rows = [{"item": json.dumps(item)} for item in items]
        options: dict[str, Any] = {"num_cpus": 1}
        if self.num_gpus:
            # Ray retires a GPU task's worker process after one call unless told
            # otherwise: every shard would pay a new process, torch import and CUDA
            # context (seen: 64 processes for 64 shards, 4-6 s each); keep them
            options.update(num_gpus=self.num_gpus, max_calls=0)
        remote = ray.remote(**options)(_task)
        ref = ray.put(job)
        cap = self.workers or len(rows)
        pending: list[Any] = []
        out: list[dict[str, Any]] = []
        try:
            for row in rows:
                if len(pending) >= cap:
                    done, pending = ray.wait(pending, num_returns=1)
                    out.extend(self._arrived(ray.get(done), on_done))
                pending.append(remote.remote(row, ref, self.task))
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                out.extend(self._arrived(ray.get(done), on_done))
        finally:
            for left in pending:  # an error: stop what has not finished
                ray.cancel(left)
        self.last_rows = out
        return out

    @staticmethod
    def _arrived(
        rows: list[dict[str, Any]], on_done: Callable[[dict[str, Any]], None] | None
    ) -> list[dict[str, Any]]:
        for row in rows:
            if on_done is not None:
                on_done(row)
        return rows

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
