"""The fuzz runner: mutate small stores, read every row in a fresh process, classify.

    python tests/fuzz/fuzz_run.py --cases 1000 --seed 0          # make fuzz
    python tests/fuzz/fuzz_run.py --kinds jpeg,yuv420 --cases 200
    python tests/fuzz/fuzz_run.py --case 0:17                    # one case again, verbose

Each case (id ``SEED:INDEX``) takes a kind of store (:data:`fuzz_stores.KINDS`, round robin),
copies its pristine store, and in a forked child draws and applies a mutation
(:mod:`fuzz_mutate`) and computes what a correct reader returns (:mod:`fuzz_reference`). Then
each *mode* reads every row in its own forked child: ``0w`` (``ChunkDataset.__getitems__`` in
batches of 8), ``2w`` (``make_loader(num_workers=2)``, fork), and for image kinds the same two
with chunkio's compiled decoders switched off (``0w-plain``, ``2w-plain``). A mode's verdict:

``ok``       the rows equal the pristine store's or the reference's for the mutated bytes
``typed``    a :class:`chunkio.errors.ChunkioError` (its message should name the file)
``untyped``  any other exception (``MemoryError`` included)
``wrong``    rows that are neither (or the store was written to)
``crash``    the child died by a signal
``hang``     no answer within ``--timeout`` seconds

A case's verdict is its modes' worst; ``split`` marks a case whose modes disagree. Results go
to ``build/fuzz/results.jsonl``, one line per case; a rerun skips the cases already there.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import pickle
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for extra in (ROOT, ROOT / "tests" / "support", ROOT / "tests" / "fuzz"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402
from fuzz_child import describe, in_child  # noqa: E402
from fuzz_reference import Rows, first_difference, reference, rows_of, same  # noqa: E402
from fuzz_stores import KINDS, Kind  # noqa: E402

VERDICTS = ("ok", "typed", "untyped", "wrong", "crash", "hang")
BAD = ("untyped", "wrong", "crash", "hang")
BATCH = 8


def modes(kind: Kind) -> tuple[str, ...]:
    """The reads of a case: 0 and 2 workers, and without the compiled decoders for images."""
    return ("0w", "2w", "0w-plain", "2w-plain") if kind.images else ("0w", "2w")


def plain_decoders() -> None:
    """Switch chunkio's compiled image decoders off in this process (and in the workers it
    forks): the module attributes the readers consult, as a build without the extensions
    leaves them. chunkio has no switch of its own for both (``CHUNKIO_JPEG_REGION=0`` covers
    the JPEG one)."""
    from chunkio.images import jpeg, yuv

    jpeg._jpegcrop = None  # type: ignore[assignment]
    jpeg.REGION_DECODE = False
    jpeg.REGION_RGBX = False
    yuv._yuv = None  # type: ignore[assignment]
    yuv.COMPILED = False


#: address space a reading process may add to what it holds at the fork: a stored size that
#: reaches an allocation then fails it (a MemoryError: untyped) instead of taking the shared
#: machine's memory
READ_MEMORY = 3 << 30


def limit_memory() -> None:
    """Cap this process's address space (not under AddressSanitizer, whose shadow memory
    is reserved address space)."""
    import resource

    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return
    with open("/proc/self/statm") as fh:
        size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + READ_MEMORY, resource.RLIM_INFINITY))


def load_extensions(folder: Path) -> None:
    """Use the compiled decoders built under ``folder`` (``make fuzz-asan``: the same sources
    with AddressSanitizer) instead of the ones beside the package: the readers look them up
    as module attributes at each call."""
    import importlib.machinery
    import importlib.util

    from chunkio.images import jpeg, yuv

    for name, module in (("_jpegcrop", jpeg), ("_yuv", yuv)):
        found = sorted(folder.rglob(f"{name}*.so"))
        if not found:
            raise SystemExit(f"fuzz: no {name}*.so under {folder}")
        spec = importlib.util.spec_from_file_location(f"chunkio.images.{name}", found[0])
        assert spec is not None and spec.loader is not None  # a path that exists: a spec
        ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ext)
        setattr(module, name, ext)
    yuv._yuv.set_lz4(yuv.lz4_decompress_address())


def _crop() -> Any:
    from chunkio.transforms import Compose, RandomResizedCrop

    return Compose([RandomResizedCrop(16, scale=(0.3, 0.9))], field="image", seed=0)


def read_rows(kind: Kind, path: Path, mode: str, timeout: float = 60.0) -> Rows:
    """Every row of the store at ``path`` read the way ``mode`` says (a loader's workers
    time out before the runner's ``timeout``: a hang inside them is then the loader's
    error, as a user sees it)."""
    import warnings

    import chunkio

    if mode.endswith("plain"):
        plain_decoders()
    fields: Any = kind.fields
    if fields == "windows":
        from weather_stores import window_fields

        fields = window_fields()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr's notes on consolidated metadata
        ds = chunkio.ChunkDataset(
            path, fields=fields, transform=_crop() if kind.crop else None, **kind.options
        )
    rows: Rows = {}
    if mode.startswith("0w"):
        for start in range(0, len(ds), BATCH):
            stop = min(start + BATCH, len(ds))
            rows_of(chunkio.collate(ds.__getitems__(list(range(start, stop)))), rows)
        return rows
    wait = max(5.0, 0.8 * timeout)
    workers = chunkio.Workers(context="fork", copy=True, timeout=wait, persistent=False)
    loader = chunkio.make_loader(ds, BATCH, shuffle=False, num_workers=2, workers=workers)
    try:
        for batch in loader:
            rows_of(batch, rows)
    finally:
        loader.close()
    return rows


def digests(rows: Rows) -> dict[str, str]:
    out = {}
    for key, values in sorted(rows.items()):
        h = hashlib.sha256()
        for v in values:
            h.update(repr((v.shape, v.dtype.str)).encode())
            h.update(np.ascontiguousarray(v).tobytes())
        out[key] = h.hexdigest()[:16]
    return out


def store_digest(path: Path) -> str:
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


# -- stores --------------------------------------------------------------------------------


def prepare(kind: Kind, out: Path, timeout: float) -> Path:
    """The pristine store of ``kind`` under ``out/stores`` (made once, in a child), and its
    rows as chunkio reads them, checked against the reference (``pristine.pkl``)."""
    folder = out / "stores" / kind.name
    ready = folder / "ready.json"
    if ready.exists():
        return folder / json.loads(ready.read_text())["store"]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)

    def make() -> dict[str, Any]:
        path = kind.make(folder)
        expected, why = reference(kind, path)
        if expected is None:
            raise RuntimeError(f"{kind.name}: the reference refuses the pristine store: {why}")
        rows = read_rows(kind, path, "0w-plain" if kind.crop else "0w")
        skip = ("image",) if kind.crop else ()
        if not same(rows, expected, skip):
            raise RuntimeError(
                f"{kind.name}: chunkio and the reference differ on the pristine store"
            )
        (folder / "pristine.pkl").write_bytes(pickle.dumps(rows))
        return {"store": str(path.relative_to(folder))}

    status, value = in_child(make, timeout * 4)
    if status != "done" or "raised" in value:
        detail = value["raised"]["traceback"] if status == "done" else f"{status} {value}"
        raise SystemExit(f"fuzz: cannot make the {kind.name} store:\n{detail}")
    ready.write_text(json.dumps(value))
    return folder / value["store"]


# -- one case ------------------------------------------------------------------------------


def case_kind(seed: int, index: int, kinds: list[str]) -> Kind:
    del seed
    return KINDS[kinds[index % len(kinds)]]


def run_case(case: str, kinds: list[str], out: Path, timeout: float) -> dict[str, Any]:
    """Case ``SEED:INDEX``: mutate, compute the reference, read in every mode, classify."""
    from fuzz_mutate import apply, plan

    seed, index = (int(x) for x in case.split(":"))
    kind = case_kind(seed, index, kinds)
    pristine_path = prepare(kind, out, timeout)
    work = out / "work" / case.replace(":", "-")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    path = work / pristine_path.name
    if pristine_path.is_dir():
        shutil.copytree(pristine_path, path)
    else:
        shutil.copy2(pristine_path, path)

    def mutate() -> dict[str, Any]:
        rng = np.random.default_rng([seed, index])
        mutation = plan(rng, path, kind.layout)
        apply(path, kind.layout, mutation)
        expected, why = reference(kind, path)
        (work / "reference.pkl").write_bytes(pickle.dumps(expected))
        return {"mutation": mutation, "reference": why or "valid"}

    status, prep = in_child(mutate, timeout)
    if status != "done" or "raised" in prep:
        shutil.rmtree(work, ignore_errors=True)
        return {
            "id": case,
            "kind": kind.name,
            "verdict": "harness",
            "detail": prep["raised"] if status == "done" else status,
        }
    before = store_digest(path)
    results = {m: run_mode(kind, path, m, out, work, timeout) for m in modes(kind)}
    touched = store_digest(path) != before
    if kind.crop:  # a changed image's crops: held to the same read with the plain decoders
        plain = results.get("0w-plain", {}).get("digests", {}).get("image")
        for r in results.values():
            same_crops = plain is not None and r.get("digests", {}).get("image") == plain
            if r["verdict"] == "wrong" and r.get("other_keys_ok") and same_crops:
                r["verdict"], r["note"] = "ok", "crops equal the plain decoders' crops"
    for r in results.values():
        if touched:
            r["verdict"], r["note"] = "wrong", "the store was written to"
    verdicts = {m: r["verdict"] for m, r in results.items()}
    worst = max(verdicts.values(), key=VERDICTS.index)
    shutil.rmtree(work, ignore_errors=True)
    return {
        "id": case,
        "kind": kind.name,
        "mutation": prep["mutation"],
        "reference": prep["reference"],
        "verdict": worst,
        "split": len(set(verdicts.values())) > 1,
        "modes": results,
        "repro": f"PYTHONPATH=. python tests/fuzz/fuzz_run.py --case {case}"
        + ("" if kinds == list(KINDS) else f" --kinds {','.join(kinds)}"),
    }


def run_mode(
    kind: Kind, path: Path, mode: str, out: Path, work: Path, timeout: float
) -> dict[str, Any]:
    pristine = pickle.loads((out / "stores" / kind.name / "pristine.pkl").read_bytes())

    stack = work / f"stack-{mode}.txt"

    def read() -> dict[str, Any]:
        limit_memory()
        # a hang's record says where: the stacks shortly before the runner's timeout
        faulthandler.dump_traceback_later(timeout * 0.9, file=stack.open("w"))
        expected = pickle.loads((work / "reference.pkl").read_bytes())
        try:
            rows = read_rows(kind, path, mode, timeout)
        except BaseException as err:
            return {"raised": describe(err, path.name)}
        image = ("image",) if kind.crop else ()
        return {
            "digests": digests(rows),
            "pristine": same(rows, pristine),
            "differs": first_difference(rows, pristine),
            # a crop kind: every other key as the reference says, the image checked apart
            "reference": same(rows, expected, image),
            "image_pristine": bool(image)
            and same({"i": rows.get("image", [])}, {"i": pristine.get("image", [])}),
        }

    started = time.monotonic()
    status, value = in_child(read, timeout)
    seconds = round(time.monotonic() - started, 2)
    if status != "done":
        where = stack.read_text()[-3000:] if stack.exists() else ""
        return {"verdict": status, "signal": value, "seconds": seconds, "traceback": where}
    if "raised" in value:
        err = value["raised"]
        return {
            "verdict": "typed" if err["typed"] else "untyped",
            "error": err["type"],
            "message": err["message"],
            "names_file": err["names_file"],
            "traceback": err["traceback"],
            "seconds": seconds,
        }
    ok = value["pristine"] or (value["reference"] and (not kind.crop or value["image_pristine"]))
    return {
        "verdict": "ok" if ok else "wrong",
        "digests": value["digests"],
        "pristine": value["pristine"],
        "differs": value["differs"],
        "other_keys_ok": value["reference"],
        "seconds": seconds,
    }


# -- the run -------------------------------------------------------------------------------


def load(results: Path) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[r["id"]] = r
    return done


def summary(records: list[dict[str, Any]]) -> str:
    """The kind x verdict table, then each case that is not ok or typed, or split."""
    table: dict[str, Counter[str]] = {}
    for r in records:
        c = table.setdefault(r["kind"], Counter())
        c[r["verdict"]] += 1
        c["split"] += bool(r.get("split"))
        c["unnamed"] += sum(
            m.get("verdict") == "typed" and not m.get("names_file")
            for m in r.get("modes", {}).values()
        )
    cols = (*VERDICTS, "split", "harness", "unnamed")
    lines = [f"{'kind':<18}" + "".join(f"{c:>9}" for c in cols)]
    total: Counter[str] = Counter()
    for name in sorted(table):
        total.update(table[name])
        lines.append(f"{name:<18}" + "".join(f"{table[name][c]:>9}" for c in cols))
    lines.append(f"{'total':<18}" + "".join(f"{total[c]:>9}" for c in cols))
    lines.append("(unnamed: typed errors, counted per mode, whose message does not name the store)")
    bad = [r for r in records if r["verdict"] in (*BAD, "harness") or r.get("split")]
    for r in bad:
        m = r.get("mutation", {})
        what = {k: v for k, v in m.items() if k not in ("offset", "xor")}
        modes_ = "; ".join(
            f"{name}={v['verdict']}"
            + (f" {v['error']}: {v['message'][-160:]}" if "error" in v else "")
            + (f" (vs pristine: {v['differs']})" if v["verdict"] == "wrong" else "")
            for name, v in r.get("modes", {}).items()
        )
        lines.append(
            f"{r['verdict']}{' split' if r.get('split') else ''} {r['id']} {r['kind']} {what}"
            f"\n    {modes_}\n    {r.get('repro', '')}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=1000, help="run cases SEED:FIRST .. SEED:CASES-1")
    p.add_argument("--first", type=int, default=0, help="(to split a run over processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz")
    p.add_argument("--results", type=Path, default=None, help="default: OUT/results.jsonl")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per read")
    p.add_argument("--case", help="rerun one case (SEED:INDEX) and print every mode's details")
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    _preimport(kinds)
    if os.environ.get("CHUNKIO_FUZZ_EXTENSIONS"):
        load_extensions(Path(os.environ["CHUNKIO_FUZZ_EXTENSIONS"]))
    if args.case:
        record = run_case(args.case, kinds, args.out, args.timeout)
        print(json.dumps(record, indent=1))
        return 0 if record["verdict"] not in (*BAD, "harness") and not record.get("split") else 1
    results = args.results or args.out / "results.jsonl"
    done = load(results)
    ids = [f"{args.seed}:{i}" for i in range(args.first, args.cases)]
    started = time.monotonic()
    with results.open("a") as fh:
        for n, case in enumerate(ids):
            if case in done and done[case].get("kinds") == kinds:
                continue
            record = run_case(case, kinds, args.out, args.timeout)
            record["kinds"] = kinds
            for m in record.get("modes", {}).values():
                m.pop("traceback", None)  # --case shows it
            done[case] = record
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            if n % 50 == 49:
                print(f"{n + 1}/{len(ids)} cases, {time.monotonic() - started:.0f} s", flush=True)
    records = [done[c] for c in ids]
    print(summary(records))
    bad = sum(r["verdict"] in (*BAD, "harness") or bool(r.get("split")) for r in records)
    return 1 if bad else 0


def _preimport(kinds: list[str]) -> None:
    """What every child needs, imported once here (a fork then costs no imports); no thread
    is started and no file opened, so forking stays safe."""
    import multiprocessing.synchronize  # noqa: F401

    import h5py  # noqa: F401
    import numcodecs  # noqa: F401
    import PIL.Image  # noqa: F401
    import scipy.sparse  # noqa: F401
    import torch  # noqa: F401
    import zarr  # noqa: F401

    if any(k.startswith("anndata") for k in kinds):
        import anndata  # noqa: F401
    if "cf" in kinds:
        import xarray  # noqa: F401

    # chunkio's own modules load on first use: each of a run's ~70 forked children would
    # otherwise import the readers (and the makers the writers) afresh, ~0.3 CPU-s apiece
    import chunkio
    import chunkio.backends.hdf5.backend
    import chunkio.backends.zarr.backend
    from chunkio.images import jpeg, yuv  # noqa: F401
    from chunkio.transforms import Compose, RandomResizedCrop  # noqa: F401

    for name in ("ChunkDataset", "collate", "make_loader", "Workers", "write_arrays",
                 "convert_images", "ImageOptions", "Output", "Execution"):  # fmt: skip
        getattr(chunkio, name)


if __name__ == "__main__":
    sys.exit(main())
