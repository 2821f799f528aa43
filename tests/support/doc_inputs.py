"""The files the documentation's recipes assume, at the smallest sizes that still run them.

A page of the docs reads ``photos/``, ``user.h5`` or ``era5.zarr`` as if the reader had them;
:func:`prepare` writes the ones a page names into its working directory, each as the tool a
user has would write it (Pillow JPEGs in class folders, nibabel NIfTI, h5py, xarray's
``to_zarr``, anndata's ``write_h5ad``). ``s3`` uploads some of them to a bucket named
``bucket`` on a local moto server and returns the environment that points boto at it
(``AWS_ENDPOINT_URL``), so ``s3://bucket/...`` in a page reaches it unchanged.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

#: an ERA5-like store needs more steps than the windows guide's ``anchors=range(0, 2000)``
ERA5_STEPS = 2004


def images(
    root: Path, *, classes: int = 2, per_class: int = 3, size: tuple[int, int] = (48, 40)
) -> None:
    """An ImageFolder: ``root/<class>/<i>.jpg``, RGB JPEGs of ``size`` (width, height)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=90)


def volumes(root: Path, *, count: int = 2, side: int = 24, nifti: bool = False) -> None:
    """``root/imagesTr`` and ``root/labelsTr``: ``count`` volumes ``(side,)*3``, int16
    intensities and uint8 labels (a foreground cube), as ``.npy`` or NIfTI (``.nii.gz``)."""
    rng = np.random.default_rng(0)
    for sub in ("imagesTr", "labelsTr"):
        (root / sub).mkdir(parents=True)
    for i in range(count):
        image = rng.integers(-100, 400, (side,) * 3).astype(np.int16)
        label = np.zeros((side,) * 3, np.uint8)
        label[side // 4 : side // 2, side // 4 : side // 2, side // 4 : side // 2] = 1
        if nifti:
            import nibabel as nib

            for sub, x in (("imagesTr", image), ("labelsTr", label)):
                nib.save(nib.Nifti1Image(x, np.eye(4)), root / sub / f"case{i}.nii.gz")
        else:
            np.save(root / "imagesTr" / f"case{i}.npy", image)
            np.save(root / "labelsTr" / f"case{i}.npy", label)


def user_h5(path: Path, *, prefix: str = "train/", n: int = 512) -> None:
    """A file as plain h5py writes it: gzip chunks of 32 images ``(3, 8, 8)`` uint8 at
    ``{prefix}images``, int64 labels at ``{prefix}labels``."""
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset(f"{prefix}images", chunks=(32, 3, 8, 8), compression="gzip",
                         data=rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8))  # fmt: skip
        f.create_dataset(f"{prefix}labels", data=rng.integers(0, 10, n))


def era5(path: Path, *, steps: int = ERA5_STEPS) -> None:
    """As xarray's ``to_zarr`` writes ERA5: ``t2m``, ``u10``, ``v10`` ``(time, 4, 8)``
    float32 chunked by 501 steps, and the ``time`` coordinate (int64 hours)."""
    import xarray as xr

    rng = np.random.default_rng(0)
    dims = ("time", "lat", "lon")
    data = {v: (dims, rng.standard_normal((steps, 4, 8)).astype(np.float32))
            for v in ("t2m", "u10", "v10")}  # fmt: skip
    ds = xr.Dataset(data, coords={"time": ("time", np.arange(steps, dtype=np.int64) * 6)})
    encoding = {v: {"chunks": (501, 4, 8)} for v in data}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's notes on consolidated metadata under v3
        ds.to_zarr(path, zarr_format=3, encoding=encoding)


def h5ad(path: Path, *, cells: int = 600, genes: int = 40, seed: int = 0) -> None:
    """An AnnData file as anndata writes it: ``X`` a CSR float32 matrix, ``obs/cell_type``
    categorical."""
    import anndata as ad
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    x = sp.random(cells, genes, density=0.1, format="csr", dtype=np.float32, random_state=rng)
    kinds = ["B", "CD4 T", "CD8 T", "NK", "Mono"][: 3 + seed % 3]
    obs = pd.DataFrame(
        {"cell_type": pd.Categorical(rng.choice(kinds, cells), categories=kinds)},
        index=[f"cell{seed}_{i}" for i in range(cells)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(genes)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's notes on index conversions
        ad.AnnData(X=x, obs=obs, var=var).write_h5ad(path)


def atlas(folder: Path, *, files: int = 3) -> None:
    """``files`` small h5ad files whose ``cell_type`` categories differ from file to file."""
    folder.mkdir(parents=True)
    for i in range(files):
        h5ad(folder / f"part{i}.h5ad", cells=200, seed=i)


def native(path: Path, *, n: int = 256) -> None:
    """A chunkio dataset of ``image`` ``(3, 8, 8)`` uint8 and ``label``."""
    from chunkio import Execution, write_arrays

    rng = np.random.default_rng(0)
    arrays = {"image": rng.integers(0, 255, (n, 3, 8, 8), dtype=np.uint8),
              "label": rng.integers(0, 10, n)}  # fmt: skip
    write_arrays(path, arrays, execution=Execution(progress=False))


def _s3(work: Path, stack: contextlib.ExitStack) -> dict[str, str]:
    from chunkio.testing.servers import KEY, REGION, SECRET, S3Server

    server = stack.enter_context(S3Server())
    staged = work / ".s3"
    native(staged / "train.zarr")
    user_h5(staged / "user.h5")
    server.upload_dir(staged, "bucket")
    # the pages read them with {"anon": True} too, as a public bucket is read (unsigned
    # requests); moto lets those through on objects readable by all, not on a bucket policy
    client = server.client()
    for path in staged.rglob("*"):
        if path.is_file():
            key = path.relative_to(staged).as_posix()
            client.put_object_acl(Bucket="bucket", Key=key, ACL="public-read")
    return {
        "AWS_ENDPOINT_URL": server.endpoint_url,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": REGION,
    }


#: what a page may ask for: a name -> a writer into the page's working directory
INPUTS: dict[str, Callable[[Path], None]] = {
    "photos": lambda w: images(w / "photos"),
    "train_images": lambda w: images(w / "train"),
    "volumes": lambda w: volumes(w),
    "toy_nifti": lambda w: volumes(w / "Task99_Toy", side=40, nifti=True),
    "user_h5": lambda w: user_h5(w / "user.h5"),
    "user_h5_other_names": lambda w: user_h5(w / "user.h5", prefix=""),
    "era5": lambda w: era5(w / "era5.zarr"),
    "pbmc": lambda w: h5ad(w / "pbmc.h5ad"),
    "atlas": lambda w: atlas(w / "atlas"),
}


def prepare(
    work: Path, names: Iterable[str], stack: contextlib.ExitStack, shared: dict[str, Any]
) -> dict[str, str]:
    """Write the inputs ``names`` into ``work``; returns environment variables the page needs
    (``s3``: a moto server, one for all the pages that share ``shared``, stopped when
    ``stack`` closes)."""
    env: dict[str, str] = {}
    for name in names:
        if name == "s3":
            if "s3" not in shared:
                shared["s3"] = _s3(work, stack)
            env.update(shared["s3"])
        else:
            INPUTS[name](work)
    return env
