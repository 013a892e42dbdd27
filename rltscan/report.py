"""The run report: what ran, on what, and how long each stage took.

``api.run`` measures and fills a :class:`RunReport`; this module only formats it
(rich tables and lines for stderr, :func:`render_run`; or a JSON object with stable
keys, :meth:`RunReport.to_dict`), ``rltscan inspect``'s answer (:func:`render_inspect`)
and the progress bar of a run while it runs (:func:`progress_bar`). It measures nothing.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rltscan import pictures
from rltscan.errors import ParameterError

if TYPE_CHECKING:  # rich loads when a report is rendered (-q, --json and the API need none)
    from rich.console import Console
    from rich.progress import Progress, TaskID
    from rich.table import Table
    from rich.text import Text


@dataclass(frozen=True)
class Stage:
    """One timed stage. ``bytes`` is the data it moved (read, copied or written)."""

    name: str
    seconds: float
    bytes: int = 0
    steps: int = 0
    skipped: bool = False

    @property
    def steps_per_s(self) -> float | None:
        if self.skipped or self.seconds <= 0 or not self.steps:
            return None
        return self.steps / self.seconds

    @property
    def gb_per_s(self) -> float | None:
        if self.skipped or self.seconds <= 0 or not self.bytes:
            return None
        return self.bytes / self.seconds / 1e9

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "bytes": self.bytes,
            "steps": self.steps,
            "steps_per_s": self.steps_per_s,
            "gb_per_s": self.gb_per_s,
            "skipped": self.skipped,
        }


@dataclass(frozen=True)
class OutputInfo:
    """One output column: its name, shape, dtype and where it went."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    location: str


@dataclass(frozen=True)
class StreamInfo:
    """How a streamed run was cut: window and block sizes (in steps), memory peaks."""

    chunk_steps: int
    block_steps: int
    windows: int
    peak_rss_bytes: int
    peak_device_bytes: int | None = None


@dataclass
class RunReport:
    """Everything ``rltscan <estimator>`` did; ``to_dict()`` is the ``--json`` object."""

    command: str
    input: str
    output: str
    format: str
    layout: str
    device: str
    backend: str
    dtype: str
    steps: int
    episodes: int
    sequences: int
    params: dict[str, Any]
    columns: dict[str, str]
    outputs: list[OutputInfo]
    stages: list[Stage]
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    written: bool = False
    rltscan_version: str = ""
    wall_seconds: float | None = None  # set when stages overlap (streaming)
    streaming: StreamInfo | None = None
    statistics: dict[str, Any] | None = None  # rltscan.stats.summary(); None: not computed
    # what is recorded beside the outputs (rltscan.plan.provenance): parameters, columns
    # read, layout and its evidence, the reading in force, the terminal rule, the options
    provenance: dict[str, Any] | None = None

    @property
    def total_seconds(self) -> float:
        if self.wall_seconds is not None:
            return self.wall_seconds
        return sum(s.seconds for s in self.stages)

    def to_dict(self) -> dict[str, Any]:
        """Stable keys; numbers are plain floats/ints, shapes are lists."""
        return {
            "rltscan_version": self.rltscan_version,
            "command": self.command,
            "input": self.input,
            "output": self.output,
            "format": self.format,
            "layout": self.layout,
            "device": self.device,
            "backend": self.backend,
            "dtype": self.dtype,
            "steps": self.steps,
            "episodes": self.episodes,
            "sequences": self.sequences,
            "params": dict(self.params),
            "columns": dict(self.columns),
            "counts": dict(self.counts),
            "outputs": [{**asdict(o), "shape": list(o.shape)} for o in self.outputs],
            "stages": [s.to_dict() for s in self.stages],
            "total_seconds": self.total_seconds,
            "dry_run": self.dry_run,
            "written": self.written,
            "notes": list(self.notes),
            "streaming": None if self.streaming is None else asdict(self.streaming),
            "statistics": self.statistics,
            "provenance": self.provenance,
        }


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def _t(value: Any) -> Text:
    """A cell or line shown as is: paths and column names may hold ``[``/``]``, which
    rich would otherwise read as markup (or fail on, e.g. ``run[/]a.h5``)."""
    from rich.text import Text

    return Text(str(value))


def summary_line(report: RunReport) -> Text:
    """``gae on rollouts.h5: flat, 1,024 steps, 17 episodes, cpu/torch float32``.

    ``steps`` counts every step of every sequence (T × B for a ``[T, B]`` buffer), the
    same count each stage's steps/s divides.
    """
    return _t(
        f"{report.command} on {report.input}: {report.layout} ({report.format}), "
        f"{report.steps:,} steps, {report.episodes:,} episodes, {report.sequences:,} sequence(s), "
        f"{report.device}/{report.backend} {report.dtype}"
    )


def note_lines(notes: list[str]) -> list[Text]:
    """``note: <text>``, one line per note (every default that changed numbers)."""
    return [_t(f"note: {note}") for note in notes]


def done_line(report: RunReport) -> Text:
    """``wrote advantages, value_targets to rollouts.h5 (hdf5)`` or the dry-run line."""
    if report.dry_run:
        return _t("dry run: nothing written")
    return _t(f"wrote {', '.join(o.name for o in report.outputs)} to {report.output}")


def timing_table(report: RunReport) -> Table:
    """One row per stage: seconds, steps/s and GB/s."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="timings", title_justify="left")
    table.add_column("stage", overflow="fold")
    for col in ("seconds", "steps/s", "GB/s"):  # a number is never split across lines
        table.add_column(col, justify="right", overflow="fold", no_wrap=True)
    for stage in report.stages:
        if stage.skipped:
            table.add_row(stage.name, "-", "-", "-", style="dim")
            continue
        table.add_row(
            stage.name,
            f"{stage.seconds:.4f}",
            _rate(stage.steps_per_s),
            _num(stage.gb_per_s, ".3f"),
        )
    label = "total (wall)" if report.wall_seconds is not None else "total"
    table.add_row(Text(label, style="bold"), f"{report.total_seconds:.4f}", "", "")
    if report.streaming is not None:
        info = report.streaming
        table.caption = (
            f"streamed in {info.windows} window(s) of {info.chunk_steps:,} steps "
            f"(blocks of {info.block_steps:,}); stages overlap; "
            f"peak RSS {info.peak_rss_bytes / 2**20:,.0f} MiB"
            + (
                ""
                if info.peak_device_bytes is None
                else f", peak device memory {info.peak_device_bytes / 2**20:,.0f} MiB"
            )
        )
    return table


def outputs_table(report: RunReport) -> Table:
    """The plan (``--dry-run``) or what was written: name, shape, dtype, where."""
    from rich.table import Table

    table = Table(title="outputs" if report.written else "would write", title_justify="left")
    for col in ("name", "shape", "dtype", "location"):
        table.add_column(col, overflow="fold")  # names and paths whole, never "…"
    for out in report.outputs:
        table.add_row(_t(out.name), str(tuple(out.shape)), out.dtype, _t(out.location))
    return table


def columns_table(columns: Mapping[str, str]) -> Table:
    """Each role and the column that fills it (the notes are :func:`note_lines`)."""
    from rich.table import Table

    table = Table(title="columns", title_justify="left")
    table.add_column("role", overflow="fold")
    table.add_column("column", overflow="fold")
    for role, name in columns.items():
        table.add_row(_t(role), _t(name))
    return table


def inspect_tables(info: Mapping[str, Any]) -> list[Table]:
    """``rltscan inspect``: layout, columns with their roles, counts, estimator readiness."""
    from rich.table import Table

    head = Table(title="input", title_justify="left", show_header=False)
    head.add_column("key", overflow="fold")
    head.add_column("value", overflow="fold")
    for key in ("input", "format", "layout", "group", "steps", "episodes", "sequences"):
        if info.get(key) is not None:
            head.add_row(key, _t(info[key]))
    for key, value in (info.get("counts") or {}).items():
        head.add_row(_t(key), _t(value))
    for note in info.get("notes", []):
        head.add_row("note", _t(note))

    cols = Table(title="columns", title_justify="left")
    for col in ("name", "shape", "dtype", "role"):
        cols.add_column(col, overflow="fold")
    for col in info["columns"]:
        cols.add_row(
            _t(col["name"]), str(tuple(col["shape"])), _t(col["dtype"]), _t(col.get("role") or "")
        )

    est = Table(title="estimators", title_justify="left")
    est.add_column("command", overflow="fold")
    est.add_column("ready", overflow="fold")
    est.add_column("what it still needs", overflow="fold")
    for name, state in info["estimators"].items():
        est.add_row(name, "yes" if state["ready"] else "no", _t(state.get("needs") or ""))
    tables = [head, cols, est]
    if info.get("decisions"):  # what the data leaves open, each with the flag that settles it
        open_ = Table(title="decisions still open", title_justify="left")
        open_.add_column("open", overflow="fold")
        open_.add_column("settle it with", overflow="fold")
        for decision in info["decisions"]:
            open_.add_row(_t(decision["what"]), _t(decision["fix"]))
        tables.append(open_)
    return tables


def _stat(value: float | None) -> str:
    return "-" if value is None else format(value, ".6g")


def statistics_table(statistics: Mapping[str, Any]) -> Table:
    """One row per output (count, non-finite, mean, std, min, max), then the episodes'
    lengths and undiscounted returns (count: complete episodes)."""
    from rich.table import Table

    table = Table(title="statistics", title_justify="left")
    table.add_column("of", overflow="fold")
    for col in ("count", "nan/inf", "mean", "std", "min", "max"):  # numbers never split
        table.add_column(col, justify="right", overflow="fold", no_wrap=True)

    def row(name: str, s: Mapping[str, Any]) -> None:
        table.add_row(
            _t(name),
            f"{s['count']:,}",
            f"{s['nonfinite']:,}",
            *(_stat(s[k]) for k in ("mean", "std", "min", "max")),
        )

    for name, s in (statistics.get("outputs") or {}).items():
        row(name, s)
    episodes = statistics.get("episodes")
    if episodes:
        row("episode length", episodes["length"])
        if episodes.get("return"):
            row("episode return", episodes["return"])
        opened = episodes["open"]
        if opened["count"]:
            table.caption = (
                f"{opened['count']:,} open episode(s) at the end of the data "
                f"({opened['steps']:,} steps) are not counted as episodes"
            )
    return table


def distribution_lines(
    statistics: Mapping[str, Any] | None, width: int, *, unicode: bool = True
) -> list[Text]:
    """One sparkline per distribution (``name  lo ▁▃█▅▂ hi``), fitted to ``width``; the
    histograms are approximate (see ``statistics.histogram_method``)."""
    from rich.text import Text

    items = pictures.distributions(statistics)
    if not items:
        return []
    pad = max(len(name) for name, _ in items)
    lines = [_t("distributions (approximate histograms, low to high):")]
    for name, hist in items:
        text = pictures.histogram_line(name.ljust(pad), hist, width, unicode=unicode)
        lines.append(Text(text, style="cyan"))
    return lines


def render_statistics(console: Console, statistics: Mapping[str, Any] | None) -> None:
    """The statistics table (runs) and one sparkline per distribution, fitted to the
    console's width (``COLUMNS``); ASCII where the output cannot show unicode blocks."""
    if not statistics:
        return
    if statistics.get("outputs"):
        console.print(statistics_table(statistics))
    unicode = pictures.can_encode(console.encoding)
    for line in distribution_lines(statistics, console.width, unicode=unicode):
        console.print(line, soft_wrap=True)


def render_run(console: Console, report: RunReport) -> None:
    """The human report of an estimator run, in order: the plan (dry runs), the summary
    line, the timings, the statistics and distributions, every note, what was written."""
    if report.dry_run:
        console.print(columns_table(report.columns))
        console.print(outputs_table(report))
    console.print(summary_line(report), soft_wrap=True)
    console.print(timing_table(report))
    render_statistics(console, report.statistics)
    for line in note_lines(report.notes):  # every note, dry run or not
        console.print(line, soft_wrap=True)
    console.print(done_line(report), soft_wrap=True)


def render_inspect(console: Console, info: Mapping[str, Any]) -> None:
    """``rltscan inspect``'s answer: :func:`inspect_tables`, then the episode
    distributions."""
    for table in inspect_tables(info):
        console.print(table)
    render_statistics(console, info.get("statistics"))


# --------------------------------------------------------------------------- progress
#
# One bar per command-line run, on stderr, shown once the run has lasted
# RLTSCAN_PROGRESS_DELAY seconds (default 1; README "Pipelines"): the stage that is
# running, and the steps done out of the steps to do as the engines report them
# (ProgressBar.advance: the streaming engine per window, the sharded engine per shard of
# each pass, the whole-file engine after its one scan). It is erased when the run ends,
# before the report prints. rich loads only when the bar shows; -q, --json and a stderr
# that is not a terminal get no bar at all (progress_bar gives None).

DELAY_ENV = "RLTSCAN_PROGRESS_DELAY"
DEFAULT_DELAY = 1.0


def delay_from(environ: Mapping[str, str]) -> float:
    """Seconds before the bar shows: ``RLTSCAN_PROGRESS_DELAY`` (``0``: at once, ``inf``:
    never), else :data:`DEFAULT_DELAY`.

    Raises:
        ParameterError: the variable is set to something that is not a number >= 0.
    """
    text = environ.get(DELAY_ENV, "").strip()
    if not text:
        return DEFAULT_DELAY
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ParameterError(
            f'{DELAY_ENV} must be a number of seconds >= 0 (or inf), got "{text}"; '
            f"unset it or set e.g. {DELAY_ENV}=1"
        )
    return value


class ProgressBar:
    """The engines' ``progress`` (:data:`rltscan.plan.Progress`): called with
    ``(stage, started)`` as stages start and end, and :meth:`advance` with steps done.
    Thread-safe: the streaming engine reports from its writer thread."""

    def __init__(self, console: Console, delay: float) -> None:
        self.console = console
        self.delay = delay
        self.lock = threading.Lock()
        self.stage = "starting"
        self.done, self.total = 0, 0
        self.progress: Progress | None = None
        self.task: TaskID | None = None
        self.closed = False
        self.timer: threading.Timer | None = None

    def start(self) -> None:
        """Show the bar once ``delay`` seconds have passed (never for an infinite delay)."""
        if math.isinf(self.delay):
            return
        self.timer = threading.Timer(self.delay, self._show)
        self.timer.daemon = True
        self.timer.start()

    def __call__(self, stage: str, started: bool) -> None:
        if started:
            with self.lock:
                self.stage = stage
                self._update()

    def advance(self, done: int, total: int) -> None:
        """``done`` of ``total`` steps are through (a new total starts a new count)."""
        with self.lock:
            self.done, self.total = done, total
            self._update()

    def close(self) -> None:
        """Stop and erase the bar (the run is over, or failed)."""
        with self.lock:
            self.closed = True
            if self.timer is not None:
                self.timer.cancel()
            if self.progress is not None:
                self.progress.stop()
                self.progress = None

    def _steps(self) -> str:
        return f"{self.done:,}/{self.total:,} steps" if self.total else ""

    def _update(self) -> None:  # (lock held)
        if self.progress is not None and self.task is not None:
            self.progress.update(
                self.task,
                description=self.stage,
                completed=self.done,
                total=self.total or None,
                steps=self._steps(),
            )
            self.progress.refresh()  # now: a stage may end before the next timed refresh

    def _show(self) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        with self.lock:
            if self.closed:
                return
            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}…"),
                BarColumn(),
                TextColumn("{task.fields[steps]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
                redirect_stdout=False,  # stdout may carry the data (-o -): never touch it
                redirect_stderr=False,
            )
            self.task = self.progress.add_task(
                self.stage, total=self.total or None, completed=self.done, steps=self._steps()
            )
            self.progress.start()


def _isatty(file: Any) -> bool:
    """Whether ``file`` is a terminal itself (``FORCE_COLOR`` makes rich call a pipe one)."""
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextmanager
def progress_bar(
    console: Console | None, environ: Mapping[str, str] | None = None
) -> Iterator[Any]:
    """A :class:`ProgressBar` on ``console`` for the ``with`` block, closed at its end
    (errors included, so an error line never lands under a bar); ``None`` when there is
    no console (``-q``, ``--json``) or it is not an interactive terminal."""
    if console is None or not (console.is_interactive and _isatty(console.file)):
        yield None
        return
    progress = ProgressBar(console, delay_from(os.environ if environ is None else environ))
    progress.start()
    try:
        yield progress
    finally:
        progress.close()
