"""Declarative image transforms: plans are pure functions of the key, shapes are known up
front, and rendering is one crop-then-resize (checked against Pillow's)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_sample_images

from chunkio.transforms import (
    CenterCrop,
    Compose,
    CropPlan,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)
from chunkio.transforms.draws import key_state as _key_state
from chunkio.transforms.draws import uniform as _uniform
from chunkio.transforms.draws import uniform2 as _uniform2
from chunkio.transforms.render import pixel_span as _pixel_span


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    """A real photo: sklearn's china.jpg, (427, 640, 3) uint8."""
    image = load_sample_images().images[0]
    assert image.shape == (427, 640, 3) and image.dtype == np.uint8
    return np.ascontiguousarray(image)


def _pillow(
    image: np.ndarray, plan: CropPlan, resample: int = Image.Resampling.BILINEAR
) -> np.ndarray:
    """Reference: Pillow crop (the plan's box rounded to whole pixels) then resize, as
    torchvision's RandomResizedCrop does on PIL images."""
    h, w = plan.size
    height, width = image.shape[:2]
    left, right = _pixel_span(plan.box[0], plan.box[2], width)
    top, bottom = _pixel_span(plan.box[1], plan.box[3], height)
    return np.asarray(
        Image.fromarray(image).crop((left, top, right, bottom)).resize((w, h), resample)
    )


def assert_resampled(got: np.ndarray, want: np.ndarray) -> None:
    """torch's uint8 kernels against Pillow's: within 2 levels, nearly all equal."""
    diff = np.abs(got.astype(int) - want.reshape(got.shape).astype(int))
    assert diff.max() <= 2 and diff.mean() < 0.05, (diff.max(), diff.mean())


# --------------------------------------------------------------------------------------------
# Randomness
# --------------------------------------------------------------------------------------------


def test_uniform_draws_are_uniform() -> None:
    """Bin counts of many draws (53-bit and both 32-bit halves) pass a chi-square check."""
    n, bins = 100_000, 50
    states = [_key_state((7, 3, i)) for i in range(n)]
    samples = {
        "u53": np.array([_uniform(s, 2, 5) for s in states]),
        "hi32": np.array([_uniform2(s, 1, 0)[0] for s in states]),
        "lo32": np.array([_uniform2(s, 1, 0)[1] for s in states]),
    }
    expected = n / bins
    for name, u in samples.items():
        assert u.min() >= 0.0 and u.max() < 1.0, name
        counts = np.bincount((u * bins).astype(int), minlength=bins)
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        # 49 degrees of freedom: mean 49, sd ~10; 100 is far in the tail.
        assert chi2 < 100, (name, chi2)


def test_draws_are_independent_across_epochs_indices_ops_and_seeds() -> None:
    n = 50_000
    base = np.array([_uniform(_key_state((0, 0, i)), 0, 0) for i in range(n)])
    others = {
        "next index": np.array([_uniform(_key_state((0, 0, i + 1)), 0, 0) for i in range(n)]),
        "next epoch": np.array([_uniform(_key_state((0, 1, i)), 0, 0) for i in range(n)]),
        "next seed": np.array([_uniform(_key_state((1, 0, i)), 0, 0) for i in range(n)]),
        "next op": np.array([_uniform(_key_state((0, 0, i)), 1, 0) for i in range(n)]),
        "next draw": np.array([_uniform(_key_state((0, 0, i)), 0, 1) for i in range(n)]),
    }
    for name, other in others.items():
        # sd of the correlation of independent samples is 1/sqrt(n) ~ 0.0045
        r = float(np.corrcoef(base, other)[0, 1])
        assert abs(r) < 0.02, (name, r)
        # joint 2-D histogram: pairs fill a 10 x 10 grid evenly
        grid = np.histogram2d(base, other, bins=10, range=[[0, 1], [0, 1]])[0]
        chi2 = float(((grid - n / 100) ** 2 / (n / 100)).sum())
        assert chi2 < 160, (name, chi2)  # 99 degrees of freedom


def test_negative_and_huge_key_parts_are_accepted() -> None:
    t = Compose([RandomResizedCrop(32)])
    a = t.plan((-1, -5, 2**70), 100, 100)
    assert a == t.plan((-1, -5, 2**70), 100, 100)
    assert a != t.plan((-1, -5, 2**70 + 1), 100, 100)


# --------------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------------


def test_plan_is_deterministic_per_key_and_varies_across_keys() -> None:
    t = Compose([RandomResizedCrop(64), RandomHorizontalFlip()])
    again = Compose([RandomResizedCrop(64), RandomHorizontalFlip()])
    plans = {}
    for key in [(0, 0, i) for i in range(200)] + [(0, e, 0) for e in range(1, 200)]:
        plan = t.plan(key, 300, 400)
        # the one-entry epoch cache must not change anything: a fresh Compose agrees
        assert plan == again.plan(key, 300, 400) == t.plan(key, 300, 400)
        plans[key] = plan
    boxes = {p.box for p in plans.values()}
    assert len(boxes) == len(plans)  # every index and every epoch gives its own crop
    assert plans[(0, 0, 5)] != t.plan((1, 0, 5), 300, 400)  # and every seed


def test_the_transform_seed_is_left_to_the_caller() -> None:
    """``Compose.seed`` is metadata: the plan depends on the key alone."""
    a = Compose([RandomResizedCrop(64)], seed=0)
    b = Compose([RandomResizedCrop(64)], seed=99)
    assert b.seed == 99 and a.field == b.field == "image"
    assert a.plan((5, 1, 2), 300, 400) == b.plan((5, 1, 2), 300, 400)


@pytest.mark.parametrize("shape", [(427, 640), (640, 427), (224, 224), (50, 900)])
def test_random_resized_crop_boxes_stay_inside_and_obey_scale_and_ratio(
    shape: tuple[int, int],
) -> None:
    height, width = shape
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    t = Compose([RandomResizedCrop((32, 48), scale=scale, ratio=ratio)])
    fallbacks = 0
    for i in range(2000):
        plan = t.plan((3, 0, i), height, width)
        left, top, right, bottom = plan.box
        assert plan.size == (32, 48) and not plan.flip
        assert all(float(v).is_integer() for v in plan.box)
        assert 0 <= left < right <= width and 0 <= top < bottom <= height
        w, h = right - left, bottom - top
        # w = round(sqrt(A r)), h = round(sqrt(A / r)): bounds widened by the rounding
        area_lo = (math.sqrt(scale[0] * height * width) - 1) ** 2 / (height * width)
        in_bounds = (
            area_lo <= w * h / (height * width) <= scale[1]
            and (w - 0.5) / (h + 0.5) <= ratio[1]
            and (w + 0.5) / (h - 0.5) >= ratio[0]
        )
        if not in_bounds:
            # the documented fallback: whole-image center crop, ratio clamped
            fallbacks += 1
            in_ratio = width / height
            if in_ratio < ratio[0]:
                exp_w, exp_h = width, round(width / ratio[0])
            elif in_ratio > ratio[1]:
                exp_w, exp_h = round(height * ratio[1]), height
            else:
                exp_w, exp_h = width, height
            exp_top, exp_left = (height - exp_h) // 2, (width - exp_w) // 2
            assert plan.box == (exp_left, exp_top, exp_left + exp_w, exp_top + exp_h), plan
    if height == 50:
        # every crop of >= 8% area with ratio <= 4/3 is > 50 px high: always the fallback
        assert fallbacks == 2000
    else:
        assert fallbacks < 100  # ten attempts almost always succeed on these shapes


def test_random_resized_crop_fallback_is_a_clamped_center_crop() -> None:
    """Crops of ~95 px can never fit a 10 px wide image: the fallback is taken every time."""
    t = Compose([RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(1.0, 1.0))])
    for i in range(20):
        plan = t.plan((0, 0, i), 1000, 10)
        assert plan.box == (0.0, 495.0, 10.0, 505.0)
    wide = Compose([RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(0.5, 2.0))])
    # ratio clamped to 2: a 20 x 10 crop at left (1000 - 20) // 2
    assert wide.plan((0, 0, 0), 10, 1000).box == (490.0, 0.0, 510.0, 10.0)


def test_random_resized_crop_positions_cover_the_image() -> None:
    """Offsets are uniform: 40 x 40 crops of a 400 x 400 image start anywhere in [0, 360]."""
    t = Compose([RandomResizedCrop(8, scale=(0.01, 0.01), ratio=(1.0, 1.0))])
    plans = [t.plan((0, 0, i), 400, 400) for i in range(4000)]
    assert {p.box[2] - p.box[0] for p in plans} == {p.box[3] - p.box[1] for p in plans} == {40.0}
    corners = np.array([p.box[:2] for p in plans])
    assert corners.min() == 0 and corners.max() == 360
    grid = np.histogram2d(corners[:, 0], corners[:, 1], bins=4, range=[[0, 361], [0, 361]])[0]
    assert grid.min() > 4000 / 16 * 0.75 and grid.max() < 4000 / 16 * 1.25


def test_random_resized_crop_offsets_reach_the_bottom_and_right_edges() -> None:
    """Each offset is uniform over every position the crop fits at, both edges included, as
    torchvision's ``get_params`` draws them (``torch.randint(0, H - h + 1)``): a 24 x 24 crop
    of a 30 x 50 image starts at each top in [0, 6] and each left in [0, 26] equally often.
    Top and left apart, so that an edge one of them never reaches is caught."""
    height, width, n = 30, 50, 5400
    t = Compose([RandomResizedCrop(8, scale=(0.384, 0.384), ratio=(1.0, 1.0))])
    plans = [t.plan((4, 1, i), height, width) for i in range(n)]
    boxes = np.array([p.box for p in plans])
    assert set(boxes[:, 2] - boxes[:, 0]) == set(boxes[:, 3] - boxes[:, 1]) == {24.0}
    for offsets, room in ((boxes[:, 1], height - 24), (boxes[:, 0], width - 24)):
        counts = np.bincount(offsets.astype(int), minlength=room + 1)
        assert len(counts) == room + 1 and counts[0] > 0 and counts[room] > 0  # both edges
        expected = n / (room + 1)
        assert counts.min() > 0.7 * expected and counts.max() < 1.3 * expected, counts


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 1.0])
def test_flip_rate_matches_p(p: float) -> None:
    t = Compose([RandomHorizontalFlip(p)])
    n = 10_000
    rate = sum(t.plan((1, 2, i), 10, 20).flip for i in range(n)) / n
    assert abs(rate - p) < 0.02
    assert t.plan((1, 2, 0), 10, 20).box == (0.0, 0.0, 20.0, 10.0)


def test_two_flips_cancel_and_flips_are_drawn_per_op() -> None:
    assert (
        not Compose([RandomHorizontalFlip(1.0), RandomHorizontalFlip(1.0)])
        .plan((0, 0, 0), 10, 10)
        .flip
    )
    t = Compose([RandomHorizontalFlip(0.5), RandomHorizontalFlip(0.5)])
    rate = sum(t.plan((0, 0, i), 10, 10).flip for i in range(10_000)) / 10_000
    assert abs(rate - 0.5) < 0.02  # two independent fair flips: odd parity half the time


# --------------------------------------------------------------------------------------------
# Shapes and torchvision semantics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "input_shape", "expected", "fixed"),
    [
        ([RandomResizedCrop(224)], (427, 640, 3), (224, 224, 3), (224, 224)),
        ([RandomResizedCrop((100, 50))], (30, 40), (100, 50), (100, 50)),
        ([CenterCrop(200)], (427, 640, 1), (200, 200, 1), (200, 200)),
        ([CenterCrop((10, 20))], (30, 40, 4), (10, 20, 4), (10, 20)),
        ([Resize(256)], (427, 640, 3), (256, 383, 3), None),
        ([Resize(256)], (640, 427), (383, 256), None),
        ([Resize(100)], (300, 300, 3), (100, 100, 3), None),
        ([Resize((100, 50))], (427, 640, 3), (100, 50, 3), (100, 50)),
        ([RandomHorizontalFlip()], (427, 640, 3), (427, 640, 3), None),
        ([], (5, 7), (5, 7), None),
        ([Resize(256), CenterCrop(224), RandomHorizontalFlip()], (427, 640, 3), (224, 224, 3),
         (224, 224)),
        ([CenterCrop(300), Resize(150)], (427, 640), (150, 150), None),
        ([RandomResizedCrop(224), Resize(112)], (427, 640, 3), (112, 112, 3), None),
        ([Resize(64), Resize((10, 12)), RandomHorizontalFlip()], (427, 640), (10, 12),
         (10, 12)),
    ],
)  # fmt: skip
def test_output_shape_and_fixed_size(
    ops: list[object],
    input_shape: tuple[int, ...],
    expected: tuple[int, ...],
    fixed: tuple[int, int] | None,
) -> None:
    t = Compose(ops)  # type: ignore[arg-type]
    assert t.output_shape(input_shape) == expected
    assert t.fixed_size == fixed
    image = np.zeros(input_shape, np.uint8)
    assert t(image, (0, 0, 1)).shape == expected
    for i in range(20):
        assert t.plan((0, 0, i), *input_shape[:2]).size == expected[:2]


@pytest.mark.parametrize("bad", [(10,), (10, 20, 2), (10, 20, 3, 1), (0, 5), (10, 20, 5), ()])
def test_output_shape_rejects_other_shapes(bad: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\(H, W\) or \(H, W, C\)"):
        Compose([Resize(8)]).output_shape(bad)


def test_center_crop_matches_torchvision_offsets() -> None:
    # torchvision: top = int(round((H - h) / 2.0)), left = int(round((W - w) / 2.0))
    assert Compose([CenterCrop(224)]).plan((0, 0, 0), 480, 640).box == (208.0, 128.0, 432.0, 352.0)
    # round half to even, as Python's round: (10 - 5) / 2 = 2.5 -> 2, (13 - 6) / 2 = 3.5 -> 4
    assert Compose([CenterCrop((5, 6))]).plan((0, 0, 0), 10, 13).box == (4.0, 2.0, 10.0, 7.0)
    # (11 - 4) / 2 = 3.5 -> 4, (12 - 7) / 2 = 2.5 -> 2
    assert Compose([CenterCrop((4, 7))]).plan((0, 0, 0), 11, 12).box == (2.0, 4.0, 9.0, 8.0)
    plan = Compose([CenterCrop(1)]).plan((0, 0, 0), 3, 3)
    assert plan == CropPlan((1.0, 1.0, 2.0, 2.0), (1, 1), False)


def test_center_crop_larger_than_input_raises_instead_of_padding() -> None:
    with pytest.raises(ValueError, match=r"CenterCrop: size \(300, 300\) is larger"):
        Compose([CenterCrop(300)]).output_shape((200, 400, 3))
    with pytest.raises(ValueError, match="CenterCrop"):
        Compose([Resize(100), CenterCrop(101)]).plan((0, 0, 0), 500, 500)


def test_resize_int_matches_torchvision_sizes() -> None:
    # torchvision: shorter side -> size, longer -> int(size * long / short)
    assert Compose([Resize(256)]).plan((0, 0, 0), 427, 640).size == (256, 383)  # 383.7 -> 383
    assert Compose([Resize(256)]).plan((0, 0, 0), 640, 427).size == (383, 256)
    assert Compose([Resize(224)]).plan((0, 0, 0), 375, 500).size == (224, 298)  # 298.67
    assert Compose([Resize(7)]).plan((0, 0, 0), 1, 1000).size == (7, 7000)
    plan = Compose([Resize(256)]).plan((0, 0, 0), 427, 640)
    assert plan.box == (0.0, 0.0, 640.0, 427.0) and not plan.flip


def test_crop_after_resize_maps_back_to_source_coordinates() -> None:
    plan = Compose([Resize((100, 200)), CenterCrop(50)]).plan((0, 0, 0), 400, 800)
    # virtual 100 x 200 image, crop at top 25, left 75; source is 4x larger on both axes
    assert plan == CropPlan((300.0, 100.0, 500.0, 300.0), (50, 50), False)
    # resize after a crop changes only the size
    plan = Compose([CenterCrop(200), Resize((20, 30))]).plan((0, 0, 0), 400, 800)
    assert plan == CropPlan((300.0, 100.0, 500.0, 300.0), (20, 30), False)


def test_crop_after_flip_is_the_mirrored_crop() -> None:
    crop = RandomResizedCrop(32, scale=(0.05, 0.2))
    plain = Compose([RandomHorizontalFlip(0.0), crop])
    flipped = Compose([RandomHorizontalFlip(1.0), crop])
    for i in range(50):
        a, b = plain.plan((0, 0, i), 300, 500), flipped.plan((0, 0, i), 300, 500)
        assert not a.flip and b.flip
        assert b.box == (500 - a.box[2], a.box[1], 500 - a.box[0], a.box[3])


def test_composition_renders_like_step_by_step_pillow(photo: np.ndarray) -> None:
    """Flip, resize, then a random crop == the same steps done one by one (up to rounding)."""
    ops = [RandomHorizontalFlip(1.0), Resize(300), RandomResizedCrop(96, scale=(0.3, 1.0))]
    t = Compose(ops)  # type: ignore[arg-type]
    key = (4, 0, 11)
    got = t(photo, key)
    # the same random crop, on the explicitly flipped and resized image
    step = np.fliplr(photo)
    step = np.asarray(Image.fromarray(step).resize((449, 300), Image.Resampling.BILINEAR))
    virtual = Compose([RandomHorizontalFlip(0.0), Resize(300), ops[2]]).plan(key, 300, 449)  # type: ignore[list-item]
    # (Resize(300) on a 300 x 449 image is the identity, so op numbers and draws line up)
    assert virtual.size == (96, 96)
    want = _pillow(step, virtual)
    diff = np.abs(got.astype(int) - want.astype(int))
    assert diff.mean() < 3.0, diff.mean()


# --------------------------------------------------------------------------------------------
# Rendering against Pillow
# --------------------------------------------------------------------------------------------


def test_render_equals_pillow_crop_then_resize(photo: np.ndarray) -> None:
    t = Compose([RandomResizedCrop(160)])
    for i in range(10):
        plan = t.plan((0, 0, i), *photo.shape[:2])
        out = np.empty((160, 160, 3), np.uint8)
        t.render(photo, plan, out)
        assert_resampled(out, _pillow(photo, plan))


@pytest.mark.parametrize(
    ("interpolation", "resample"),
    [
        ("nearest", Image.Resampling.NEAREST),
        ("bilinear", Image.Resampling.BILINEAR),
        ("bicubic", Image.Resampling.BICUBIC),
    ],
)
def test_render_uses_the_interpolation(
    photo: np.ndarray, interpolation: str, resample: int
) -> None:
    t = Compose([Resize((100, 130), interpolation=interpolation), CenterCrop(90)])
    plan = t.plan((0, 0, 0), *photo.shape[:2])
    assert_resampled(t(photo), _pillow(photo, plan, resample))
    other = (
        Image.Resampling.BICUBIC
        if resample != Image.Resampling.BICUBIC
        else Image.Resampling.BILINEAR
    )
    assert not np.array_equal(t(photo), _pillow(photo, plan, other))


def test_flip_equals_fliplr_of_the_resample(photo: np.ndarray) -> None:
    t = Compose([RandomResizedCrop((120, 90)), RandomHorizontalFlip(1.0)])
    plan = t.plan((2, 0, 3), *photo.shape[:2])
    assert plan.flip
    assert_resampled(t(photo, (2, 0, 3)), np.fliplr(_pillow(photo, plan)))


def test_render_at_half_scale_is_close_to_full_scale(photo: np.ndarray) -> None:
    """A half-size decode (as JPEG DCT scaling gives) with scale=0.5 renders nearly the same."""
    half = np.asarray(Image.fromarray(photo).reduce(2))
    assert half.shape == (214, 320, 3)  # ceil(427 / 2)
    t = Compose([RandomResizedCrop(96, scale=(0.3, 1.0)), RandomHorizontalFlip()])
    for i in range(5):
        plan = t.plan((0, 0, i), *photo.shape[:2])
        full = np.empty((96, 96, 3), np.uint8)
        reduced = np.empty((96, 96, 3), np.uint8)
        t.render(photo, plan, full)
        t.render(half, plan, reduced, scale=0.5)
        diff = np.abs(full.astype(int) - reduced.astype(int))
        assert diff.mean() < 4.0, (i, diff.mean())
        # and the scale matters: ignoring it renders the wrong region
        wrong = np.empty_like(reduced)
        t.render(half, plan, wrong, scale=0.25)
        assert np.abs(full.astype(int) - wrong.astype(int)).mean() > 10


def test_render_clips_a_scaled_box_that_overshoots_by_rounding() -> None:
    source = np.arange(101 * 99, dtype=np.uint8).reshape(101, 99)  # odd sizes
    t = Compose([Resize((20, 20))])
    plan = t.plan((0, 0, 0), 101, 99)
    half = source[::2, ::2][:50, :49]  # a decoder that floors: 50 x 49 < 50.5 x 49.5
    out = np.empty((20, 20), np.uint8)
    t.render(half, plan, out, scale=0.5)
    want = np.asarray(
        Image.fromarray(half).resize((20, 20), Image.Resampling.BILINEAR, box=(0, 0, 49, 50))
    )
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("channels", [None, 1, 3, 4])
def test_render_supports_gray_and_1_3_4_channels(photo: np.ndarray, channels: int | None) -> None:
    if channels is None:
        image = photo[..., 0].copy()
    elif channels == 4:
        image = np.concatenate([photo, np.full((*photo.shape[:2], 1), 255, np.uint8)], axis=2)
    else:
        image = np.ascontiguousarray(photo[..., :channels])
    t = Compose([RandomResizedCrop(64), RandomHorizontalFlip(1.0)])
    plan = t.plan((0, 0, 0), *image.shape[:2])
    out = t(image)
    assert out.shape == t.output_shape(image.shape) == (64, 64, *image.shape[2:])
    ref = _pillow(image[..., 0] if channels == 1 else image, plan)
    if channels == 4:  # Pillow resamples RGBA (premultiplied alpha) on its box: exact
        want = np.asarray(Image.fromarray(image).resize((64, 64), Image.BILINEAR, box=plan.box))
        np.testing.assert_array_equal(out, np.fliplr(want))
    else:
        assert_resampled(out.reshape(ref.shape), np.fliplr(ref))


def test_identity_plan_copies_without_resampling(photo: np.ndarray) -> None:
    t = Compose([RandomHorizontalFlip(1.0)])
    np.testing.assert_array_equal(t(photo), np.fliplr(photo))
    np.testing.assert_array_equal(Compose([])(photo), photo)


def test_out_as_a_strided_view_into_a_batch(photo: np.ndarray) -> None:
    t = Compose([RandomResizedCrop((40, 30)), RandomHorizontalFlip()])
    batch = np.full((4, 40, 60, 3), 7, np.uint8)
    before = batch.copy()
    row = batch[2, :, ::2]  # every other column of row 2: a non-contiguous view
    assert not row.flags.c_contiguous and row.base is not None
    t.apply(photo, row, (0, 0, 9))
    want = t(photo, (0, 0, 9))
    np.testing.assert_array_equal(batch[2, :, ::2], want)
    changed = batch != before
    changed[2, :, ::2] = False
    assert not changed.any()  # nothing outside the view was touched
    assert (batch[2, :, ::2] != 7).any()


def test_apply_is_render_of_plan(photo: np.ndarray) -> None:
    t = Compose([Resize(200), RandomResizedCrop(50), RandomHorizontalFlip()])
    a = np.empty((50, 50, 3), np.uint8)
    b = np.empty((50, 50, 3), np.uint8)
    t.apply(photo, a, (1, 2, 3))
    t.render(photo, t.plan((1, 2, 3), 427, 640), b)
    np.testing.assert_array_equal(a, b)
    c = np.empty_like(a)
    t.apply(photo, c, (1, 2, 4))
    assert not np.array_equal(a, c)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (lambda: RandomResizedCrop(0), ValueError, r"RandomResizedCrop: size .* got 0"),
        (lambda: RandomResizedCrop((3, -1)), ValueError, r"RandomResizedCrop: size .*\(3, -1\)"),
        (lambda: RandomResizedCrop("224"), TypeError, r"RandomResizedCrop: size .* got '224'"),
        (lambda: RandomResizedCrop(True), TypeError, r"RandomResizedCrop: size .* got True"),
        (lambda: RandomResizedCrop(8, scale=(0.5, 0.1)), ValueError,
         r"RandomResizedCrop: scale must be .*0 < min <= max, got \(0.5, 0.1\)"),
        (lambda: RandomResizedCrop(8, scale=(0.0, 1.0)), ValueError, r"scale .*\(0.0, 1.0\)"),
        (lambda: RandomResizedCrop(8, ratio=(2, 1)), ValueError,
         r"RandomResizedCrop: ratio .* got \(2, 1\)"),
        (lambda: RandomResizedCrop(8, ratio=1.0), TypeError, r"RandomResizedCrop: ratio .* 1.0"),
        (lambda: RandomResizedCrop(8, interpolation="lanczos"), ValueError,
         r"RandomResizedCrop: interpolation must be one of .*bicubic.* got 'lanczos'"),
        (lambda: CenterCrop((1, 2, 3)), TypeError, r"CenterCrop: size .*\(1, 2, 3\)"),
        (lambda: CenterCrop(2.5), TypeError, r"CenterCrop: size .* 2.5"),
        (lambda: Resize(-4), ValueError, r"Resize: size .* -4"),
        (lambda: Resize(4, interpolation="area"), ValueError, r"Resize: interpolation.*'area'"),
        (lambda: RandomHorizontalFlip(1.5), ValueError, r"RandomHorizontalFlip: p .* 1.5"),
        (lambda: RandomHorizontalFlip("0.5"), TypeError, r"RandomHorizontalFlip: p .* '0.5'"),
        (lambda: Compose([Resize(4), "flip"]), TypeError, r"Compose: ops\[1\] .* 'flip'"),
        (lambda: Compose(Resize(4)), TypeError, r"Compose: ops must be a sequence"),
        (lambda: Compose([], field=""), TypeError, r"Compose: field .* ''"),
        (lambda: Compose([], seed=1.5), TypeError, r"Compose: seed .* 1.5"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_clear_errors(
    make: object, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("dtype", [np.uint16, np.float32, np.int8, bool])
def test_render_rejects_other_dtypes(dtype: type) -> None:
    t = Compose([Resize((4, 4))])
    image = np.zeros((8, 8, 3), dtype)
    with pytest.raises(TypeError, match=rf"dtype must be uint8, got {np.dtype(dtype)}.*supported"):
        t(image)
    with pytest.raises(TypeError, match="uint8"):
        t.render(image, t.plan((0, 0, 0), 8, 8), np.empty((4, 4, 3), np.uint8))


def test_render_rejects_a_wrong_out_or_scale() -> None:
    t = Compose([Resize((4, 4))])
    image = np.zeros((8, 8, 3), np.uint8)
    plan = t.plan((0, 0, 0), 8, 8)
    with pytest.raises(ValueError, match=r"out must be uint8 of shape \(4, 4, 3\).*\(4, 4\)"):
        t.render(image, plan, np.empty((4, 4), np.uint8))
    with pytest.raises(ValueError, match=r"out must be uint8 .* got float32"):
        t.render(image, plan, np.empty((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="scale must be a positive number, got 0"):
        t.render(image, plan, np.empty((4, 4, 3), np.uint8), scale=0)
    with pytest.raises(ValueError, match=r"image shape .* got \(8, 8, 2\)"):
        t(np.zeros((8, 8, 2), np.uint8))
    with pytest.raises(ValueError, match="input size must be positive"):
        t.plan((0, 0, 0), 0, 8)


def test_compose_pickles_for_worker_processes(photo: np.ndarray) -> None:
    t = Compose([Resize(200), RandomResizedCrop(50), RandomHorizontalFlip()], field="x", seed=3)
    t.plan((1, 1, 1), 427, 640)  # fills the epoch cache
    u = pickle.loads(pickle.dumps(t))
    assert (u.field, u.seed, u.ops) == ("x", 3, t.ops)
    for i in range(20):
        assert u.plan((1, 2, i), 427, 640) == t.plan((1, 2, i), 427, 640)
    np.testing.assert_array_equal(u(photo, (0, 0, 1)), t(photo, (0, 0, 1)))


def test_normalize_matches_the_float_formula_and_checks_its_input() -> None:
    import torch

    from chunkio.transforms import IMAGENET_MEAN, IMAGENET_STD, normalize

    x = torch.randint(0, 256, (2, 3, 5, 5), dtype=torch.uint8)
    want = (x.float() / 255 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(
        IMAGENET_STD
    ).view(1, 3, 1, 1)
    torch.testing.assert_close(normalize(x), want)
    assert normalize(x, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="uint8"):
        normalize(x.float())
    with pytest.raises(ValueError, match="one value per channel"):
        normalize(x, (0.5,), (0.5,))
