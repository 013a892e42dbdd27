"""The CLI's native libraries, loaded on a thread while the file is opened and planned.

A run that the torch-free lane takes (:func:`rltscan.estimators.host.lane`: the cpu
backend on the CPU, an estimator with a fused kernel) loads only numba and its CPU
target: it never imports torch (~1.0-1.3 s of CPU on the 2-core machine). Every other
run loads torch as below.

An estimator command needs torch (and triton for a GPU run, numba and its CPU target
for the cpu backend) only when its first window is computed. Imported in line they
were ~2 s of start-up on the 2-core machine before anything touched the file; on
:class:`Loading`'s thread they load while the main thread parses the options, opens
the file, plans, starts the HDF5 safety copy and reads the first windows. The main
thread's first ``import torch`` waits for the thread's (Python's import lock), and the
first cpu kernel call finds numba's target loaded. Measured: bench/results/
cpu-stream-2core-2026-12-05-b/.

Only third-party modules and :mod:`rltscan.scan` are imported here, never a module that
the main thread imports from its own module bodies, so the two threads cannot wait on
each other's import locks. Ctrl-C still reaches the main thread only (Python delivers
signals there), so a ``KeyboardInterrupt`` is never raised inside torch's
initialisation. A failure here is kept, not raised: the main thread meets the same
import where it needs the module and reports it in one line (:meth:`Loading.reason`
for torch; :func:`rltscan.scan.numba_missing` for numba).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator

from rltscan.errors import BackendUnavailableError, RltscanError

TORCH_FIX = "reinstall it: pip install 'torch>=2.4' (or pip install --force-reinstall rltscan)"


class Loading:
    """The loading thread of one CLI run: :meth:`start` it, :meth:`join` it before the
    process exits (a daemon thread stopped inside a native library's initialisation
    at interpreter exit may hang or crash the exit)."""

    def __init__(
        self,
        *,
        device: str,
        backend: str,
        kind: str | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        self.device, self.backend, self.on_done = device, backend, on_done
        self.torch = needs_torch(kind, device, backend)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._load, name="rltscan-preload", daemon=True)

    @classmethod
    def start(
        cls,
        *,
        device: str,
        backend: str,
        kind: str | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> Loading:
        """Start loading for a run of estimator ``kind`` (None: any); ``on_done()`` runs
        on the thread once it is over (the CLI's ``modules_loaded``: the collector stays
        off while the modules load)."""
        loading = cls(device=device, backend=backend, kind=kind, on_done=on_done)
        loading._thread.start()
        return loading

    def join(self) -> None:
        self._thread.join()

    def reason(self) -> BackendUnavailableError | None:
        """Once joined: torch's import failure as the one-line error (exit 6), or None."""
        self.join()
        if self.error is None:
            return None
        err = self.error
        return BackendUnavailableError(f"torch cannot be imported ({err})", TORCH_FIX)

    def _load(self) -> None:
        try:
            if not self.torch:
                from rltscan import scan

                with numba_without_scipy():
                    scan.load_cpu_target()
                return
            import torch

            # a backend that fails here fails again, in one line, where the run resolves it
            with contextlib.suppress(Exception):
                load_backends(self.device, self.backend, torch.cuda.is_available())
        except BaseException as err:  # the main thread meets it again (see reason())
            self.error = err
        finally:
            if self.on_done is not None:
                self.on_done()


@contextlib.contextmanager
def numba_without_scipy() -> Iterator[None]:
    """numba imported while SciPy looks absent: a torch-free CLI run's loading thread.

    At import numba probes SciPy's BLAS (``numba.np.arraymath._check_blas`` imports
    ``scipy.linalg``) so that ``np.dot`` and ``np.linalg`` work in jitted code;
    rltscan's kernels use neither. Where SciPy is installed the probe was 0.2-0.35 s of
    the ~1 s of CPU that loading numba's cpu target took on the 2-core machine (three
    runs each with and without it, bench/results/cpu-stream-2core-2026-12-07-g/, where
    streamed runs with it hidden beat those without in 10 of 12 pairs of the same
    rounds). Only the CLI's own process does this, and only while SciPy
    and numba are not loaded yet: the Python API never touches a user's modules. SciPy
    imports normally once numba is loaded; only numba's BLAS-backed functions stay off
    in this process, which runs no jitted code but rltscan's."""
    if "scipy" in sys.modules or "numba" in sys.modules:
        yield
        return
    sys.modules["scipy"] = None  # type: ignore[assignment]  # an import of it fails at once
    try:
        yield
    finally:
        if "scipy" in sys.modules and sys.modules["scipy"] is None:
            del sys.modules["scipy"]


def needs_torch(kind: str | None, device: str, backend: str) -> bool:
    """Whether a run of estimator ``kind`` with these options will import torch: every
    run but those the torch-free lane takes (decided there, without importing numba or
    torch; a block the lane hands back loads torch in line)."""
    from rltscan.devices import planned_device
    from rltscan.estimators import host

    if kind is None:
        return True
    try:
        dev = planned_device(device)
    except RltscanError:  # the run refuses it, in one line
        return True
    return not host.lane(kind, backend, dev, load=False)


def load_backends(device: str, backend: str, cuda: bool) -> None:
    """What the backend that will run needs: triton on a GPU (``auto``, ``triton``),
    numba and its CPU target on the CPU (``auto``, ``cpu``)."""
    from rltscan import scan

    on_gpu = device != "cpu" and cuda
    if on_gpu and backend in ("auto", "triton"):
        scan.triton_missing()
    if not on_gpu and backend in ("auto", "cpu"):
        scan.load_cpu_target()
