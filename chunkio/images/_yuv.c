/* YUV 4:2:0 planes -> RGB for one box of an image: the read side of the yuv420 encoding.
 *
 * to_rgb(src, out, height, width, band, first_band, top, left, out_h, out_w) converts the box
 * [top, top + out_h) x [left, left + out_w) of an image stored as bands of `band` luma rows
 * (band even) into `out`, C-contiguous uint8 (out_h, out_w, 3).  `src` holds the bands
 * first_band, first_band + 1, ... one after another, each its Y rows (width bytes each), then
 * its U rows, then its V rows (ceil(rows / 2) rows of ceil(width / 2) bytes each); the bands
 * must cover the box's rows and one chroma row of context above and below it (where the image
 * has one).
 *
 * The arithmetic is libjpeg's, integer for integer (jdsample.c h2v2_fancy_upsample, jdcolor.c
 * ycc_rgb_convert, 16 fraction bits), so the pixels equal what libjpeg-turbo decodes from a
 * 4:2:0 JPEG with these planes (do_fancy_upsampling), and numpy's reference in
 * chunkio/images/yuv.py computes the same integers.  Chroma is sited between luma pairs
 * (JFIF): each output row and column takes 3/4 of its nearer chroma sample and 1/4 of the
 * next one beyond, edges replicated.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#define SCALEBITS 16
#define ONE_HALF ((int32_t)1 << (SCALEBITS - 1))

/* libjpeg's FIX() of each coefficient (jdcolor.c) */
#define K_CR_R 91881   /* FIX(1.40200) */
#define K_CB_B 116130  /* FIX(1.77200) */
#define K_CR_G (-46802) /* -FIX(0.71414) */
#define K_CB_G (-22554) /* -FIX(0.34414) */

struct planes {
    const uint8_t *src;
    long height, width, cw, ch, band, first_band, band_bytes, len;
};

/* Row pointers into src; NULL where a row lies outside the bands given. */
static const uint8_t *luma_row(const struct planes *p, long y)
{
    long b = y / p->band - p->first_band;
    size_t at = (size_t)b * (size_t)p->band_bytes + (size_t)(y % p->band) * (size_t)p->width;
    return b < 0 || (long)at + p->width > p->len ? NULL : p->src + at;
}

static const uint8_t *chroma_row(const struct planes *p, long c, int v)
{
    long half = p->band / 2, b = c / half - p->first_band;
    long rows = p->height - (c / half) * p->band; /* luma rows in that band */
    if (rows > p->band)
        rows = p->band;
    long crow = (rows + 1) / 2;
    size_t at = (size_t)b * (size_t)p->band_bytes + (size_t)rows * (size_t)p->width +
                (size_t)(v * crow + c % half) * (size_t)p->cw;
    return b < 0 || (long)at + p->cw > p->len ? NULL : p->src + at;
}

/* AVX2 where the CPU has it (GCC picks the clone at load time): the vectorized colour loop
   runs about twice as fast as with SSE2 alone, the x86-64 baseline */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

CLONES static int convert(const struct planes *p, uint8_t *out, long top, long left, long oh, long ow,
                   int32_t *scratch)
{
    long c0 = left / 2 - 1, c1 = (left + ow - 1) / 2 + 1; /* chroma columns, with context */
    if (c0 < 0)
        c0 = 0;
    if (c1 > p->cw - 1)
        c1 = p->cw - 1;
    long n = c1 - c0 + 1;
    /* column sums with one more at each end (an edge repeated), so no branch per pixel */
    int32_t *su = scratch + 1, *sv = scratch + n + 3;
    uint8_t *uu = (uint8_t *)(scratch + 2 * n + 4), *vv = uu + 2 * n + 2;
    long x0 = 2 * c0; /* uu[x - x0] is the upsampled chroma of column x */
    for (long y = top; y < top + oh; y++) {
        long c = y / 2, far = y % 2 ? c + 1 : c - 1;
        if (far < 0)
            far = 0;
        if (far > p->ch - 1)
            far = p->ch - 1;
        const uint8_t *yr = luma_row(p, y), *un = chroma_row(p, c, 0), *uf = chroma_row(p, far, 0),
                      *vn = chroma_row(p, c, 1), *vf = chroma_row(p, far, 1);
        if (!yr || !un || !uf || !vn || !vf)
            return 1;
        for (long k = 0; k < n; k++) {
            su[k] = 3 * un[c0 + k] + uf[c0 + k];
            sv[k] = 3 * vn[c0 + k] + vf[c0 + k];
        }
        su[-1] = su[0], sv[-1] = sv[0], su[n] = su[n - 1], sv[n] = sv[n - 1];
        for (long k = 0; k < n; k++) {
            uu[2 * k] = (uint8_t)((3 * su[k] + su[k - 1] + 8) >> 4);
            uu[2 * k + 1] = (uint8_t)((3 * su[k] + su[k + 1] + 7) >> 4);
            vv[2 * k] = (uint8_t)((3 * sv[k] + sv[k - 1] + 8) >> 4);
            vv[2 * k + 1] = (uint8_t)((3 * sv[k] + sv[k + 1] + 7) >> 4);
        }
        const uint8_t *ur = uu + (left - x0), *vr = vv + (left - x0), *lr = yr + left;
        uint8_t *o = out + (size_t)(y - top) * (size_t)ow * 3;
        /* the tables' values, computed: the same integers, and a loop the compiler vectorizes */
        for (long x = 0; x < ow; x++) {
            int32_t l = lr[x], u = (int32_t)ur[x] - 128, v = (int32_t)vr[x] - 128;
            int32_t r = l + ((K_CR_R * v + ONE_HALF) >> SCALEBITS);
            int32_t g = l + ((K_CB_G * u + ONE_HALF + K_CR_G * v) >> SCALEBITS);
            int32_t b = l + ((K_CB_B * u + ONE_HALF) >> SCALEBITS);
            o[3 * x] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            o[3 * x + 1] = (uint8_t)(g < 0 ? 0 : g > 255 ? 255 : g);
            o[3 * x + 2] = (uint8_t)(b < 0 ? 0 : b > 255 ? 255 : b);
        }
    }
    return 0;
}

static PyObject *to_rgb(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer src, out;
    long height, width, band, first_band, top, left, oh, ow;
    if (!PyArg_ParseTuple(args, "y*w*llllllll", &src, &out, &height, &width, &band, &first_band,
                          &top, &left, &oh, &ow))
        return NULL;
    PyObject *result = NULL;
    if (height < 1 || width < 1 || band < 2 || band % 2 || first_band < 0 || top < 0 ||
        left < 0 || oh < 1 || ow < 1 || top + oh > height || left + ow > width) {
        PyErr_SetString(PyExc_ValueError, "to_rgb: the box is not inside the image");
        goto done;
    }
    if (!PyBuffer_IsContiguous(&out, 'C') || out.len != (Py_ssize_t)oh * ow * 3) {
        PyErr_SetString(PyExc_ValueError, "to_rgb: out must be C-contiguous (out_h, out_w, 3)");
        goto done;
    }
    struct planes p = {.src = (const uint8_t *)src.buf, .height = height, .width = width,
                       .cw = (width + 1) / 2, .ch = (height + 1) / 2, .band = band,
                       .first_band = first_band, .len = (long)src.len};
    p.band_bytes = band * width + band * p.cw; /* Y, then U and V of band / 2 rows */
    int32_t *sums = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)(p.cw + 4));
    if (sums == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = convert(&p, (uint8_t *)out.buf, top, left, oh, ow, sums);
    Py_END_ALLOW_THREADS
    free(sums);
    if (failed)
        PyErr_SetString(PyExc_ValueError, "to_rgb: the bands given do not cover the box");
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"to_rgb", to_rgb, METH_VARARGS,
     "to_rgb(src, out, height, width, band, first_band, top, left, out_h, out_w)\n"
     "Convert a box of banded YUV 4:2:0 planes to RGB into `out` (libjpeg's arithmetic)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_yuv",
                                    "YUV 4:2:0 to RGB (libjpeg's arithmetic).", -1, methods};

PyMODINIT_FUNC PyInit__yuv(void)
{
    return PyModule_Create(&module);
}
