"""Repack Ray's wheel without what Python Ray Data never loads, so it fits a 64 MiB carry.

Ray's official wheel (ray 2.60.0, cp312, manylinux2014: 79 MB) holds 32 MB of Java
jars (``ray/jars/``, used only by Ray's Java workers and cross-language calls) and
~1.5 MB of the dashboard's JavaScript source maps (``*.js.map``, read only by a
browser's developer tools). Neither is imported or opened by ``ray.init`` or a
Ray Data pipeline (``rltscan --engine ray`` starts Ray with the dashboard off).
This script drops them, drops their lines from ``*.dist-info/RECORD``, adds a
build tag (``Build: N`` in ``WHEEL`` and in the file name, e.g.
``ray-2.60.0-1-cp312-cp312-manylinux2014_x86_64.whl``) so the result is a valid,
distinct wheel, and checks every kept file against its RECORD hash.

    python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \\
        --implementation cp --platform manylinux2014_x86_64 -d /tmp/raywhl ray==2.60.0
    python bench/repack_ray.py /tmp/raywhl/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \\
        -o bench/.wheels
    # on the target: pip install --no-deps bench/.wheels/*.whl (plus jsonschema,
    # jsonschema-specifications, referencing, rpds-py if missing there)
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import zipfile
from pathlib import Path

# Paths (fnmatch patterns on the archive name) that Python Ray never opens.
DROP = ("ray/jars/*", "*.js.map")


def _hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def repack(src: Path, out_dir: Path, build: str = "1", drop: tuple[str, ...] = DROP) -> Path:
    name = src.name
    parts = name[: -len(".whl")].split("-")
    if len(parts) != 5:  # name-version-python-abi-platform: no build tag yet
        raise SystemExit(f"{name}: expected a wheel without a build tag")
    dist, version, py, abi, plat = parts
    dest = out_dir / f"{dist}-{version}-{build}-{py}-{abi}-{plat}.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    info = f"{dist}-{version}.dist-info"
    dropped: list[tuple[str, int]] = []
    with zipfile.ZipFile(src) as zin:
        members = zin.infolist()
        record = zin.read(f"{info}/RECORD").decode()
        expected = {row[0]: row[1] for row in csv.reader(io.StringIO(record)) if row}
        keep = []
        for m in members:
            if any(fnmatch.fnmatch(m.filename, p) for p in drop):
                dropped.append((m.filename, m.compress_size))
            else:
                keep.append(m)
        rows = []
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for m in keep:
                if m.filename == f"{info}/RECORD" or m.is_dir():
                    continue
                data = zin.read(m)
                if expected.get(m.filename) and expected[m.filename] != _hash(data):
                    raise SystemExit(f"{m.filename}: hash differs from RECORD")
                if m.filename == f"{info}/WHEEL":
                    text = data.decode()
                    lines = [ln for ln in text.splitlines() if not ln.startswith("Build:")]
                    data = ("\n".join(lines).rstrip("\n") + f"\nBuild: {build}\n").encode()
                zi = zipfile.ZipInfo(m.filename, date_time=m.date_time)
                zi.external_attr = m.external_attr  # keep executable bits (.so, scripts)
                zi.compress_type = zipfile.ZIP_DEFLATED
                zout.writestr(zi, data, compresslevel=6)
                rows.append([m.filename, _hash(data), str(len(data))])
            rows.append([f"{info}/RECORD", "", ""])
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zout.writestr(zi, buf.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    saved = sum(size for _, size in dropped)
    print(
        f"{src.name} ({src.stat().st_size / 1e6:.1f} MB) -> {dest.name} "
        f"({dest.stat().st_size / 1e6:.1f} MB): dropped {len(dropped)} files, "
        f"{saved / 1e6:.1f} MB compressed ({', '.join(drop)})"
    )
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path, help="the official wheel, e.g. from pip download")
    ap.add_argument("-o", "--out-dir", type=Path, default=Path("bench/.wheels"))
    ap.add_argument("--build", default="1", help="build tag (a number first)")
    args = ap.parse_args()
    repack(args.wheel, args.out_dir, args.build)


if __name__ == "__main__":
    main()
