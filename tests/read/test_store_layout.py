"""One open path: :func:`chunkio.format.store_layout.open_layout` decides native or foreign (and
each field's kind) for every dataset, converter and report, and nothing else decides again.
A dataset reads its labels through a public method, and holds its reader options as one
frozen value that pickles with it."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_stores import data, h5py_file, volumes_h5py

import chunkio
from chunkio.backends import ReaderOptions, open_reader
from chunkio.errors import FormatError, IncompleteDatasetError
from chunkio.format.layout import COMPLETE_KEY
from chunkio.format.store_layout import LayoutOptions, open_layout
from chunkio.patches import PatchDataset

PACKAGE = Path(chunkio.__file__).parent


class _Attrs:
    """A reader of root attributes only (what open_layout asks first)."""

    location = "fake.zarr"

    def __init__(self, attrs: dict[str, Any]) -> None:
        self._attrs = attrs

    def attrs(self) -> dict[str, Any]:
        return self._attrs

    def array_names(self) -> list[str]:
        return []


def test_a_native_dataset_is_told_by_its_attributes(make_dataset: Any) -> None:
    path, arrays = make_dataset("zarr")
    reader = open_reader(path)
    try:
        found = open_layout(reader, {"ignored": "x"})  # a native store describes itself
    finally:
        reader.close()
    assert found.native and not found.foreign and found.complete
    assert found.layout is not None and set(found.layout.field_names) == set(arrays)
    assert found.arrays == {} and found.volumes is None
    assert not found.reader_options(ReaderOptions(fill_missing=True)).fill_missing


def test_a_users_store_is_read_by_the_arrays_fields_names(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    reader = open_reader(path)
    try:
        found = open_layout(reader, {"image": "train/images", "label": "train/labels"})
        with pytest.raises(FormatError, match="fields must name its arrays"):
            open_layout(reader, None)  # strict: a dataset needs its arrays named
        described = open_layout(reader, None, LayoutOptions(strict=False))
        volumes = open_layout(reader, ["train/images"], LayoutOptions(spatial=3))
    finally:
        reader.close()
    assert found.foreign and not found.complete
    assert found.layout is not None and found.layout.foreign
    assert [f.kind for f in found.layout.fields] == ["dense", "dense"]
    assert {n: a.name for n, a in found.arrays.items()} == {
        "image": "train/images",
        "label": "train/labels",
    }
    assert found.reader_options(ReaderOptions(trust_codecs=True)) == ReaderOptions(
        trust_codecs=True, fill_missing=True
    )
    assert described.layout is None and described.error is None  # a report lists arrays
    assert volumes.volumes is not None and volumes.volumes.count == len(data()[0])


def test_volumes_of_a_users_store_come_with_the_layout(tmp_path: Path) -> None:
    path = volumes_h5py(tmp_path)
    ds = PatchDataset(path, (4, 4, 4), fields={"image": "vol/image", "label": "vol/label"})
    assert ds.layout.foreign and ds.reader_options.fill_missing
    assert pickle.loads(pickle.dumps(ds)).reader_options == ds.reader_options


def test_reports_describe_what_a_strict_open_refuses() -> None:
    broken = _Attrs({"chunkio": {"format": "chunkio", "version": 1}})  # no fields
    with pytest.raises(FormatError):
        open_layout(broken)  # type: ignore[arg-type]
    kept = open_layout(broken, None, LayoutOptions(strict=False))  # type: ignore[arg-type]
    assert kept.native and kept.layout is None and isinstance(kept.error, FormatError)
    with pytest.raises(FormatError):
        kept.dataset_layout()


def test_an_incomplete_dataset_is_refused_strictly_and_described_otherwise(
    make_dataset: Any,
) -> None:
    path, _ = make_dataset("zarr")
    reader = open_reader(path)
    attrs = dict(reader.attrs())
    reader.close()
    del attrs[COMPLETE_KEY]
    incomplete = _Attrs(attrs)
    with pytest.raises(IncompleteDatasetError):
        open_layout(incomplete)  # type: ignore[arg-type]
    found = open_layout(incomplete, None, LayoutOptions(strict=False))  # type: ignore[arg-type]
    assert found.native and not found.complete and found.layout is not None


def _sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]


def test_only_open_layout_decides_native_or_foreign() -> None:
    """The decision (the format attribute's presence) and the foreign layouts it leads to
    live in one module: a new field kind or store layout is added there, not in every
    dataset, converter and report (there were five such places)."""
    decides = re.compile(
        r"\bATTR_KEY\s+(not\s+)?in\b|[\"']chunkio[\"']\s+(not\s+)?in\s+\w*attrs|"
        r"\b(foreign_fields|foreign_volumes|layout_of|is_chunkio_dataset)\("
    )
    allowed = {PACKAGE / "format" / "store_layout.py", PACKAGE / "format" / "foreign.py"}
    hits = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path, text in _sources()
        if path not in allowed
        for n, line in enumerate(text.splitlines(), 1)
        if decides.search(line) and not line.lstrip().startswith(("#", "def "))
    ]
    assert hits == []


@pytest.mark.parametrize(
    "module", ["sampling/label_check.py", "diagnose/doctor.py", "diagnose/doctor_chunking.py"]
)
def test_the_label_check_and_doctor_use_no_private_member_of_a_dataset(module: str) -> None:
    """They read a dataset through its public API (``labels()``, ``reader_options``), not
    through private calls into its internals."""
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    private = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert private == []


def test_labels_reads_the_label_field_whole_whatever_fields_selects(make_dataset: Any) -> None:
    path, arrays = make_dataset("zarr")
    ds = chunkio.ChunkDataset(path, fields="image")
    labels = ds.labels()
    assert labels is not None and labels.dtype == np.int64
    np.testing.assert_array_equal(labels, arrays["label"])
    assert ds._local is None  # no handle kept in this process (workers may fork later)
    no_labels, _ = make_dataset("zarr", {"x": np.zeros((10, 2), np.float32)})
    assert chunkio.ChunkDataset(no_labels).labels() is None


def test_labels_of_a_users_store_go_by_the_names_users_give_them(tmp_path: Path) -> None:
    path = h5py_file(tmp_path)
    ds = chunkio.ChunkDataset(path, fields=["train/images", "train/labels"])
    labels = ds.labels()
    assert labels is not None
    np.testing.assert_array_equal(labels, data()[1])


def test_reader_options_are_one_frozen_value_that_pickles_with_the_dataset(
    make_dataset: Any,
) -> None:
    path, _ = make_dataset("zarr")
    ds = chunkio.ChunkDataset(path, fields="label", trust_codecs=True, storage_options=None)
    assert ds.reader_options == ReaderOptions(trust_codecs=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.reader_options.trust_codecs = False  # type: ignore[misc]
    assert not hasattr(ds, "_options") and not hasattr(ds, "_lent")
    ds.read_batch([0])
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.reader_options == ds.reader_options and clone._local is None


def test_the_constructor_and_make_loaders_path_share_one_set_of_defaults() -> None:
    """``__init__`` and the path that takes an open reader (``dataset.opening``) configure a dataset
    through one method; its defaults are the constructor's."""
    import inspect

    init = inspect.signature(chunkio.ChunkDataset.__init__).parameters
    configure = inspect.signature(chunkio.ChunkDataset._configure).parameters
    shared = [n for n in configure if n not in ("self", "path", "transform")]
    assert shared and all(configure[n].default == init[n].default for n in shared)
    # what the dataset reads of the store (its arrays, with windows its anchors, how its
    # sparse fields are batched) goes to its layout, not to the configuration
    assert set(init) - set(configure) == {"fields", "anchors", "sparse_batches"}
