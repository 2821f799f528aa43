"""Single-cell files as anndata itself writes them, from scanpy's ``pbmc68k_reduced.h5ad``.

The shipped file (``tests/data/singlecell/``, see its README) uses the 2017 layout: a dense
scaled ``X``, the counts as a legacy ``h5sparse_format: csr`` group named ``raw.X``, ``obs`` a
compound dataset whose categorical columns are ``int8`` codes with their categories in
``uns/<column>_categories``. Every other file here is written at test time by anndata from the
same cells, with the sparse counts (``raw.X``, 700 x 765 float32 CSR) as ``X``: h5ad, AnnData
Zarr v2 and v3, Zarr v3 sharded the way annbatch's ``write_sharded`` does it, a CSC copy, a
dense-``X`` copy, and the cells split over three h5ad files whose categories differ in order and
subset. Each writer returns a :class:`SingleCell`: the path(s) and what a reader must return.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

#: the file as scanpy 1.11.5 ships it (BSD-3-Clause, see tests/data/singlecell/README.md)
PBMC = Path(__file__).resolve().parents[1] / "data" / "singlecell" / "pbmc68k_reduced.h5ad"
#: obs columns kept in the re-saved files: three categorical, two numeric
CATEGORICAL = ("bulk_labels", "louvain", "phase")
NUMERIC = ("n_genes", "percent_mito")
#: every CSR fixture of tests/singlecell/conftest.py, by name (for request.getfixturevalue)
CSR_FIXTURES = ("pbmc_legacy", "pbmc_h5ad", "pbmc_zarr_v2", "pbmc_zarr_v3", "pbmc_zarr_sharded")
#: annbatch's ``write_sharded`` defaults, scaled to 700 cells so there are several shards
OBS_PER_CHUNK, OBS_PER_SHARD = 64, 256


@dataclass(frozen=True)
class SingleCell:
    """A single-cell file (or files) and what reading it must give.

    ``paths``: the files in order (one unless split); ``x_field``: the matrix's path inside a
    file (``"X"``, or ``"raw.X"`` in the legacy file); ``x``: the expected matrix, CSR (a CSC
    fixture keeps it CSR here: the rows a reader should have returned) or dense ``ndarray``;
    ``obs``: the expected obs columns over all cells (categoricals as pandas categoricals; across
    split files, compare ``labels``); ``labels``: each categorical column's category name per
    cell, which is what a multi-file remap must preserve whatever the code order.
    """

    paths: tuple[Path, ...]
    x_field: str
    x: Any
    obs: pd.DataFrame
    encoding: str

    @property
    def path(self) -> Path:
        return self.paths[0]

    @property
    def labels(self) -> dict[str, np.ndarray[Any, Any]]:
        return {c: self.obs[c].astype(str).to_numpy() for c in CATEGORICAL}

    def fields(self, label: str = "louvain") -> dict[str, str]:
        return {"x": self.x_field, "label": f"obs/{label}"}


@contextmanager
def _quiet() -> Iterator[None]:
    # anndata warns on the 2017 layout (OldFormatWarning) and on index conversions; the
    # warnings are about the files we write on purpose, not about the code under test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def source() -> Any:
    """The shipped file read by anndata: an ``AnnData`` with X the sparse counts (CSR)."""
    import anndata as ad

    with _quiet():
        shipped = ad.read_h5ad(PBMC)
        counts = sp.csr_matrix(shipped.raw.X)
        obs = shipped.obs[list(CATEGORICAL + NUMERIC)].copy()
        var = pd.DataFrame(index=shipped.raw.var_names.astype(str))
        return ad.AnnData(X=counts, obs=obs, var=var, obsm={"X_pca": shipped.obsm["X_pca"]})


def legacy(tmp: Path) -> SingleCell:
    """(a) The file as shipped, copied so no test can touch the repository's copy."""
    adata = source()
    path = tmp / "pbmc68k_reduced.h5ad"
    shutil.copyfile(PBMC, path)
    return SingleCell((path,), "raw.X", adata.X, adata.obs, "h5sparse_format: csr")


def h5ad(tmp: Path, *, name: str = "pbmc.h5ad", compression: str | None = None) -> SingleCell:
    """(b) A modern h5ad, X a ``csr_matrix`` group (anndata's defaults: no compression)."""
    adata = source()
    path = tmp / name
    with _quiet():
        adata.write_h5ad(path, compression=compression)
    return SingleCell((path,), "X", adata.X, adata.obs, "csr_matrix")


def zarr_store(tmp: Path, zarr_format: int) -> SingleCell:
    """(c, d) AnnData Zarr v2 or v3, anndata's default chunks."""
    import anndata as ad

    adata = source()
    path = tmp / f"pbmc_v{zarr_format}.zarr"
    with _quiet(), ad.settings.override(zarr_write_format=zarr_format):
        adata.write_zarr(path)
    return SingleCell((path,), "X", adata.X, adata.obs, "csr_matrix")


def zarr_sharded(tmp: Path) -> SingleCell:
    """(e) Zarr v3 sharded as annbatch 0.3's ``write_sharded`` writes it.

    The same settings and callback: ``auto_shard_zarr_v3``, the smallest index dtype, every
    obs-aligned array (and X's ``data``/``indices``) chunked by ``OBS_PER_CHUNK`` cells' worth
    of elements and sharded by ``OBS_PER_SHARD`` cells, Blosc lz4 with byte shuffle.
    """
    import anndata as ad
    import zarr
    from zarr.codecs import BloscCodec

    adata = source()
    path = tmp / "pbmc_sharded.zarr"
    compressors = (BloscCodec(cname="lz4", clevel=3, shuffle="shuffle"),)

    def callback(write: Any, store: Any, name: str, elem: Any, dataset_kwargs: Mapping[str, Any],
                 *, iospec: Any) -> None:  # fmt: skip
        kwargs = dict(dataset_kwargs)
        obs_aligned = any(n in store.name for n in ("obsm", "layers", "obsp")) or name == "X"
        if iospec.encoding_type == "array" and obs_aligned:
            chunk = min(OBS_PER_CHUNK, elem.shape[0])
            shard = max(chunk, min(OBS_PER_SHARD, elem.shape[0]) // chunk * chunk)
            kwargs |= {"chunks": (chunk, *elem.shape[1:]), "shards": (shard, *elem.shape[1:]),
                       "compressors": compressors}  # fmt: skip
        elif iospec.encoding_type in ("csr_matrix", "csc_matrix"):
            per_obs = elem.nnz / elem.shape[0]
            chunk = max(1, int(OBS_PER_CHUNK * per_obs))
            shard = max(chunk, int(OBS_PER_SHARD * per_obs) // chunk * chunk)
            kwargs |= {"chunks": (chunk,), "shards": (shard,), "compressors": compressors}
        write(store, name, elem, dataset_kwargs=kwargs)

    settings = {"auto_shard_zarr_v3": True, "zarr_write_format": 3,
                "write_csr_csc_indices_with_min_possible_dtype": True}  # fmt: skip
    with _quiet(), ad.settings.override(**settings):
        group = zarr.open_group(path, mode="w", zarr_format=3)
        ad.experimental.write_dispatched(group, "/", adata, callback=callback)
        zarr.consolidate_metadata(group.store)
    return SingleCell((path,), "X", adata.X, adata.obs, "csr_matrix (sharded)")


def csc(tmp: Path) -> SingleCell:
    """(f) X stored column-major (``csc_matrix``): a reader should refuse it."""
    adata = source()
    rows = adata.X
    adata.X = sp.csc_matrix(rows)
    path = tmp / "pbmc_csc.h5ad"
    with _quiet():
        adata.write_h5ad(path)
    return SingleCell((path,), "X", rows, adata.obs, "csc_matrix")


def dense(tmp: Path) -> SingleCell:
    """(h) X a dense float32 array (anndata's ``array`` encoding)."""
    adata = source()
    adata.X = adata.X.toarray()
    path = tmp / "pbmc_dense.h5ad"
    with _quiet():
        adata.write_h5ad(path)
    return SingleCell((path,), "X", adata.X, adata.obs, "array")


#: louvain clusters per file of the split: file 0 and 1 overlap on 3-4, file 2 holds the rest
SPLIT = ({"0", "1", "2", "3", "4"}, {"3", "4", "5", "6", "7"})


def split(tmp: Path) -> SingleCell:
    """(g) The cells over three h5ad files whose categories differ between files.

    File 0 holds louvain 0-4 (half of 3 and 4) with only the categories present, file 1 the
    rest of 3-4 and 5-7 with its present categories in reverse order, file 2 everything else
    with all 11 categories shuffled; ``bulk_labels`` and ``phase`` likewise subset and reordered.
    The expected ``obs`` is the concatenation in file order, as strings per cell in ``labels``.
    """
    adata = source()
    louvain = adata.obs["louvain"].astype(str).to_numpy()
    first = np.isin(louvain, list(SPLIT[0])) & ((np.arange(adata.n_obs) % 2 == 0)
                                               | ~np.isin(louvain, list(SPLIT[1])))  # fmt: skip
    second = ~first & np.isin(louvain, list(SPLIT[1]))
    parts = [np.flatnonzero(first), np.flatnonzero(second), np.flatnonzero(~first & ~second)]
    rng = np.random.default_rng(0)
    paths, obs = [], []
    for k, rows in enumerate(parts):
        part = adata[rows].copy()
        for col in CATEGORICAL:
            present = part.obs[col].cat.remove_unused_categories()
            cats = list(present.cat.categories)
            if k == 1:
                cats = cats[::-1]
            elif k == 2:
                cats = list(adata.obs[col].cat.categories)
                rng.shuffle(cats)
            part.obs[col] = present.cat.set_categories(cats)
        path = tmp / f"pbmc_part{k}.h5ad"
        with _quiet():
            part.write_h5ad(path)
        paths.append(path)
        obs.append(part.obs.astype({c: str for c in CATEGORICAL}))
    x = sp.vstack([adata.X[rows] for rows in parts], format="csr")
    whole = pd.concat(obs).astype({c: "category" for c in CATEGORICAL})
    return SingleCell(tuple(paths), "X", x, whole, "csr_matrix")
