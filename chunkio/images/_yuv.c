/* The read side of the yuv420 encoding (chunkio/images/yuv.py gives the layout): one box of an
 * image decoded straight from its bytes.
 *
 * decode_box(data, scratch, out, top, left, out_h, out_w, out_channels) checks the header and
 * the band offsets, decompresses the LZ4 bands that cover the box's rows and one chroma row of
 * context above and below it (where the image has one) into `scratch`, and converts the box
 * [top, top + out_h) x [left, left + out_w) into `out`: C-contiguous uint8, 3 bytes a pixel
 * (RGB), 4 (RGBX: the resize's input, which torch's uint8 kernels take without repacking) or
 * 1 for a gray image.  Every read and write is bounds-checked: corrupt bytes raise Corrupt.
 *
 * The arithmetic is libjpeg's, integer for integer (jdsample.c h2v2_fancy_upsample, jdcolor.c
 * ycc_rgb_convert, 16 fraction bits), so the pixels equal what libjpeg-turbo decodes from a
 * 4:2:0 JPEG with these planes (do_fancy_upsampling), and numpy's reference in
 * chunkio/images/yuv.py computes the same integers.  Chroma is sited between luma pairs
 * (JFIF): each output row and column takes 3/4 of its nearer chroma sample and 1/4 of the
 * next one beyond, edges replicated.  The loops run on 16-bit chroma sums and 32-bit pixels
 * with unit strides, which the compiler vectorizes (-O3; AVX2 clones where the CPU has it).
 *
 * rgbx_to_rgb(src, dst, h, w, flip, planar) writes (h, w, 4) RGBX pixels into a batch row,
 * (h, w, 3) or channels-first (3, h, w) if `planar`, mirrored if `flip`: the last copy of a
 * resized crop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One output row's upsampled chroma, for columns [left, left + ow): each column takes 3/4 of
 * its nearer chroma sample's vertical sum and 1/4 of the next one beyond (edges repeated),
 * h2v2_fancy_upsample's integers.  su/sv hold the vertical sums of chroma columns
 * c0 - 1 .. c1 + 1 at su[-1 .. n] (the caller fills the ends); `shift` is left - 2 * c0. */
CLONES static void upsample_row(const int16_t *su, const int16_t *sv, long shift, long ow,
                                int16_t *uu, int16_t *vv)
{
    long x = 0, k = shift >> 1;
    if (shift & 1) { /* the box starts at the second column of a pair */
        uu[0] = (int16_t)((3 * su[k] + su[k + 1] + 7) >> 4);
        vv[0] = (int16_t)((3 * sv[k] + sv[k + 1] + 7) >> 4);
        x = 1, k++;
    }
    long pairs = (ow - x) / 2;
    int16_t *ue = uu + x, *ve = vv + x;
    const int16_t *a = su + k, *b = sv + k;
    for (long i = 0; i < pairs; i++) {
        ue[2 * i] = (int16_t)((3 * a[i] + a[i - 1] + 8) >> 4);
        ue[2 * i + 1] = (int16_t)((3 * a[i] + a[i + 1] + 7) >> 4);
        ve[2 * i] = (int16_t)((3 * b[i] + b[i - 1] + 8) >> 4);
        ve[2 * i + 1] = (int16_t)((3 * b[i] + b[i + 1] + 7) >> 4);
    }
    x += 2 * pairs, k += pairs;
    if (x < ow) {
        uu[x] = (int16_t)((3 * su[k] + su[k - 1] + 8) >> 4);
        vv[x] = (int16_t)((3 * sv[k] + sv[k - 1] + 8) >> 4);
    }
}

/* libjpeg's ycc_rgb_convert, its tables' values computed (the same integers) */
#define PIXEL(l, u, v, r, g, b)                                                                  \
    int32_t r = (l) + ((K_CR_R * (v) + ONE_HALF) >> SCALEBITS);                                  \
    int32_t g = (l) + ((K_CB_G * (u) + ONE_HALF + K_CR_G * (v)) >> SCALEBITS);                   \
    int32_t b = (l) + ((K_CB_B * (u) + ONE_HALF) >> SCALEBITS);                                  \
    r = r < 0 ? 0 : r > 255 ? 255 : r;                                                           \
    g = g < 0 ? 0 : g > 255 ? 255 : g;                                                           \
    b = b < 0 ? 0 : b > 255 ? 255 : b

CLONES static void colour_row3(const uint8_t *lr, const int16_t *uu, const int16_t *vv, long ow,
                               uint8_t *o)
{
    for (long x = 0; x < ow; x++) {
        int32_t l = lr[x], u = uu[x] - 128, v = vv[x] - 128;
        PIXEL(l, u, v, r, g, b);
        o[3 * x] = (uint8_t)r;
        o[3 * x + 1] = (uint8_t)g;
        o[3 * x + 2] = (uint8_t)b;
    }
}

/* RGBX: one 32-bit store per pixel (little-endian R, G, B, 255), a loop the compiler
   vectorizes whole */
/* The same integers as PIXEL with 16-bit multipliers (products of 16-bit values, which vector
   units multiply twice as wide as 32-bit ones): each constant above 2^15 is split into a
   multiple of 65536, which comes out of the shift whole, and the rest:
   91881 = 65536 + 26345, 116130 = 131072 - 14942, -46802 = -65536 + 18734. */
CLONES static void colour_row4(const uint8_t *lr, const int16_t *uu, const int16_t *vv, long ow,
                               uint32_t *o)
{
    for (long x = 0; x < ow; x++) {
        int16_t u = (int16_t)(uu[x] - 128), v = (int16_t)(vv[x] - 128);
        int32_t l = lr[x];
        int32_t r = l + v + (((int32_t)v * 26345 + ONE_HALF) >> SCALEBITS);
        int32_t g = l - v + (((int32_t)u * -22554 + (int32_t)v * 18734 + ONE_HALF) >> SCALEBITS);
        int32_t b = l + 2 * u + (((int32_t)u * -14942 + ONE_HALF) >> SCALEBITS);
        r = r < 0 ? 0 : r > 255 ? 255 : r;
        g = g < 0 ? 0 : g > 255 ? 255 : g;
        b = b < 0 ? 0 : b > 255 ? 255 : b;
        o[x] = (uint32_t)r | ((uint32_t)g << 8) | ((uint32_t)b << 16) | 0xFF000000u;
    }
}

CLONES static void vertical_sums(const uint8_t *un, const uint8_t *uf, const uint8_t *vn,
                                 const uint8_t *vf, long n, int16_t *su, int16_t *sv)
{
    for (long k = 0; k < n; k++) {
        su[k] = (int16_t)(3 * un[k] + uf[k]);
        sv[k] = (int16_t)(3 * vn[k] + vf[k]);
    }
}

/* The box [top, top + oh) x [left, left + ow) into out: `channels` 3 (RGB) or 4 (RGBX) bytes
 * a pixel, rows `stride` bytes apart.  scratch: 4 * (cw + 4) + 2 * ow int16. */
static int convert(const struct planes *p, uint8_t *out, long stride, int channels, long top,
                   long left, long oh, long ow, int16_t *scratch)
{
    long c0 = left / 2 - 1, c1 = (left + ow - 1) / 2 + 1; /* chroma columns, with context */
    if (c0 < 0)
        c0 = 0;
    if (c1 > p->cw - 1)
        c1 = p->cw - 1;
    long n = c1 - c0 + 1;
    /* column sums with one more at each end (an edge repeated), so no branch per pixel */
    int16_t *su = scratch + 1, *sv = scratch + n + 3;
    int16_t *uu = scratch + 2 * n + 4, *vv = uu + ow;
    long shift = left - 2 * c0; /* the box's first column, counted from column 2 * c0 */
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
        vertical_sums(un + c0, uf + c0, vn + c0, vf + c0, n, su, sv);
        su[-1] = su[0], sv[-1] = sv[0], su[n] = su[n - 1], sv[n] = sv[n - 1];
        upsample_row(su, sv, shift, ow, uu, vv);
        uint8_t *o = out + (size_t)(y - top) * (size_t)stride;
        if (channels == 4)
            colour_row4(yr + left, uu, vv, ow, (uint32_t *)o);
        else
            colour_row3(yr + left, uu, vv, ow, o);
    }
    return 0;
}

/* -- LZ4 ----------------------------------------------------------------------------------
 * One LZ4 block (the format of lz4's LZ4_decompress_safe) into exactly `cap` bytes; 0 on
 * success, 1 for data that is not such a block.  It refuses exactly what lz4 1.10's
 * LZ4_decompress_safe refuses (its control flow, checks and limits are followed one for one:
 * a fast loop while 64 bytes of output are left, then a safe loop; the end-of-block rules,
 * last literals 6 bytes from the input's end or 12 from the output's, no match ending in the
 * last 5 bytes; the length bytes' read limits; an offset of 0 copies zeros), and gives the
 * same bytes, so pixels and refusals do not depend on which of the two decodes.  Indices, not
 * pointers: every read and write is bounds-checked by the conditions it follows. */
static int lz4_more(const uint8_t *src, long n, long *i, long limit, int initial, long *len)
{
    if ((initial && *i >= limit) || *i >= n)
        return 1;
    unsigned s;
    do {
        s = src[(*i)++];
        *len += (long)s;
        if (*i > limit)
            return 1;
    } while (s == 255);
    return 0;
}

/* ml bytes from `offset` back (byte by byte where they overlap: LZ77's repeat) */
static void lz4_match(uint8_t *dst, long o, long offset, long ml)
{
    if (offset == 0)
        memset(dst + o, 0, (size_t)ml);
    else if (offset >= ml)
        memcpy(dst + o, dst + o - offset, (size_t)ml);
    else
        for (long k = 0; k < ml; k++)
            dst[o + k] = dst[o + k - offset];
}

static int lz4_block(const uint8_t *src, size_t size, uint8_t *dst, size_t capacity)
{
    long n = (long)size, cap = (long)capacity, i = 0, o = 0, lit, ml, offset, cpy;
    unsigned token;
    if (cap == 0)
        return !(n == 1 && src[0] == 0);
    if (n == 0)
        return 1;
    int fast = cap >= 64;
    for (;;) {
        if (i >= n)
            return 1; /* lz4 never gets here (asserted): each way in leaves a byte */
        token = src[i++];
        lit = token >> 4;
        if (fast) { /* at least 64 bytes of output left */
            if (lit == 15) {
                if (lz4_more(src, n, &i, n - 15, 1, &lit))
                    return 1;
                if (o + lit > cap - 32 || i + lit > n - 32) {
                    fast = 0;
                    goto safe_literals;
                }
            } else if (i > n - 17) {
                fast = 0;
                goto safe_literals;
            }
            memcpy(dst + o, src + i, (size_t)lit);
            i += lit, o += lit;
            offset = (long)src[i] | ((long)src[i + 1] << 8);
            i += 2;
            ml = token & 15;
            if (ml == 15 && lz4_more(src, n, &i, n - 4, 0, &ml))
                return 1;
            ml += 4;
            if (o + ml >= cap - 64) {
                fast = 0;
                goto safe_match;
            }
            if (offset > o)
                return 1;
            lz4_match(dst, o, offset, ml);
            o += ml;
            continue;
        }
        if (lit != 15 && i < n - 16 && o <= cap - 32) { /* lz4's two-stage shortcut */
            memcpy(dst + o, src + i, (size_t)lit);
            o += lit, i += lit;
            ml = token & 15;
            offset = (long)src[i] | ((long)src[i + 1] << 8);
            i += 2;
            if (ml != 15 && offset >= 8 && offset <= o) {
                lz4_match(dst, o, offset, ml + 4);
                o += ml + 4;
                continue;
            }
            goto match_length;
        }
        if (lit == 15 && lz4_more(src, n, &i, n - 15, 1, &lit))
            return 1;
    safe_literals:
        cpy = o + lit;
        if (cpy > cap - 12 || i + lit > n - 6) { /* must be the last sequence */
            if (i + lit != n || cpy > cap)
                return 1;
            memcpy(dst + o, src + i, (size_t)lit);
            return cpy != cap;
        }
        memcpy(dst + o, src + i, (size_t)lit);
        i += lit, o = cpy;
        offset = (long)src[i] | ((long)src[i + 1] << 8);
        i += 2;
        ml = token & 15;
    match_length:
        if (ml == 15 && lz4_more(src, n, &i, n - 4, 0, &ml))
            return 1;
        ml += 4;
    safe_match:
        if (offset > o || o + ml > cap - 5)
            return 1;
        lz4_match(dst, o, offset, ml);
        o += ml;
    }
}

/* lz4's own LZ4_decompress_safe where Python found it (numcodecs' build, the library that
   wrote the bands: somewhat faster than lz4_block, with the same verdicts), else NULL */
typedef int (*lz4_safe_fn)(const char *src, char *dst, int src_size, int dst_capacity);
static lz4_safe_fn lz4_safe = NULL;

static int lz4_decompress(const uint8_t *src, size_t n, uint8_t *dst, size_t cap)
{
    if (lz4_safe != NULL && n < INT32_MAX && cap < INT32_MAX)
        return lz4_safe((const char *)src, (char *)dst, (int)n, (int)cap) != (int)cap;
    return lz4_block(src, n, dst, cap);
}

static PyObject *set_lz4(PyObject *self, PyObject *arg)
{
    (void)self;
    unsigned long long address = PyLong_AsUnsignedLongLong(arg);
    if (address == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    lz4_safe = (lz4_safe_fn)(uintptr_t)address;
    return Py_NewRef(Py_None);
}

/* -- decode_box ---------------------------------------------------------------------------- */

#define HEAD 16 /* b"Y420", height u32, width u32, channels u8, codec u8, band u16 */
#define LZ4_RATIO 255 /* the most bytes an LZ4 block gives per byte of it (yuv.py) */

static PyObject *Corrupt; /* _yuv.Corrupt, a ValueError: the bytes are not a yuv420 image */

static uint32_t le32(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static long band_size(long height, long width, long channels, long band, long i)
{
    long rows = height - i * band < band ? height - i * band : band;
    return rows * width + (channels == 3 ? 2 * ((rows + 1) / 2) * ((width + 1) / 2) : 0);
}

struct box {
    long top, left, oh, ow;
    int out_channels; /* 1 (gray out), 3 (RGB) or 4 (RGBX) */
};

/* Decompress the bands that cover the box (and its chroma context) into scratch, then
 * convert.  Returns 0, or -1 with `why` set (corrupt data), or the scratch bytes needed. */
static long decode(const uint8_t *d, size_t len, uint8_t *scratch, size_t cap, uint8_t *out,
                   const struct box *bx, char *why, size_t why_len)
{
    long height = (long)le32(d + 4), width = (long)le32(d + 8), channels = d[12];
    long band = (long)d[14] | ((long)d[15] << 8);
    long count = (height + band - 1) / band;
    size_t start = HEAD + 4 * (size_t)(count + 1);
    if (len < start) {
        snprintf(why, why_len, "%zu bytes, shorter than the offsets of its %ld bands", len, count);
        return -1;
    }
    const uint8_t *offs = d + HEAD;
    if (le32(offs) != 0 || start + le32(offs + 4 * (size_t)count) != len) {
        snprintf(why, why_len, "band offsets do not add up to its %zu bytes (truncated?)", len);
        return -1;
    }
    /* every band checked, as yuv.py's _parse checks them (the same order and messages): a
       corrupt band is refused wherever the box is, by either path */
    for (long i = 0; i < count; i++) {
        long long a = le32(offs + 4 * (size_t)i), b = le32(offs + 4 * (size_t)(i + 1));
        if (b - a < 4) {
            snprintf(why, why_len, "band %ld: offsets that do not rise by 4 or more", i);
            return -1;
        }
    }
    for (long i = 0; i < count; i++) {
        long long a = le32(offs + 4 * (size_t)i), b = le32(offs + 4 * (size_t)(i + 1));
        long long n = band_size(height, width, channels, band, i);
        uint32_t declared = le32(d + start + a);
        if ((long long)declared != n || n > LZ4_RATIO * (b - a - 4)) {
            snprintf(why, why_len, "band %ld declares %u bytes in %lld; its rows are %lld", i,
                     declared, b - a - 4, n);
            return -1;
        }
    }
    long top = bx->top, oh = bx->oh;
    long first = channels == 3 ? (top - 2 < 0 ? 0 : top - 2) / band : top / band;
    long last_row = channels == 3 ? (height < top + oh + 2 ? height : top + oh + 2) - 1
                                  : top + oh - 1;
    long last = last_row / band;
    size_t need = 0;
    for (long i = first; i <= last; i++)
        need += (size_t)band_size(height, width, channels, band, i);
    if (need > cap)
        return (long)need;
    size_t at = 0;
    for (long i = first; i <= last; i++) {
        uint32_t a = le32(offs + 4 * (size_t)i), b = le32(offs + 4 * (size_t)(i + 1));
        size_t n = (size_t)band_size(height, width, channels, band, i);
        if (lz4_decompress(d + start + a + 4, b - a - 4, scratch + at, n)) {
            snprintf(why, why_len, "band %ld: LZ4 data that does not decompress to its %zu bytes",
                     i, n);  /* yuv.py's message too */
            return -1;
        }
        at += n;
    }
    if (channels == 1) { /* gray: the box's luma rows as they are (whole bands before the last) */
        for (long y = top; y < top + oh; y++)
            memcpy(out + (size_t)(y - top) * (size_t)bx->ow,
                   scratch + (size_t)(y - first * band) * (size_t)width + (size_t)bx->left,
                   (size_t)bx->ow);
        return 0;
    }
    struct planes p = {.src = scratch, .height = height, .width = width, .cw = (width + 1) / 2,
                       .ch = (height + 1) / 2, .band = band, .first_band = first,
                       .len = (long)at};
    p.band_bytes = band * width + band * p.cw;
    int16_t *sums = (int16_t *)malloc(sizeof(int16_t) * (4 * (size_t)(p.cw + 4) + 2 * (size_t)bx->ow));
    if (sums == NULL) {
        snprintf(why, why_len, "out of memory");
        return -2;
    }
    int failed = convert(&p, out, bx->ow * bx->out_channels, bx->out_channels, top, bx->left, oh,
                         bx->ow, sums);
    free(sums);
    if (failed) {
        snprintf(why, why_len, "the bands do not cover the box");
        return -1;
    }
    return 0;
}

static PyObject *decode_box(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, scratch, out;
    struct box bx;
    if (!PyArg_ParseTuple(args, "y*w*w*lllli", &data, &scratch, &out, &bx.top, &bx.left, &bx.oh,
                          &bx.ow, &bx.out_channels))
        return NULL;
    PyObject *result = NULL;
    const uint8_t *d = (const uint8_t *)data.buf;
    size_t len = (size_t)data.len;
    if (len < HEAD || memcmp(d, "Y420", 4) != 0 || d[13] != 1) {
        PyErr_SetString(Corrupt, "not a yuv420 image (header)");
        goto done;
    }
    long height = (long)le32(d + 4), width = (long)le32(d + 8), channels = d[12];
    long band = (long)d[14] | ((long)d[15] << 8);
    if (height < 1 || width < 1 || (channels != 1 && channels != 3) || band < 2 || band % 2) {
        PyErr_SetString(Corrupt, "not a yuv420 image (header)");
        goto done;
    }
    int oc = bx.out_channels;
    if (bx.top < 0 || bx.left < 0 || bx.oh < 1 || bx.ow < 1 || bx.top + bx.oh > height ||
        bx.left + bx.ow > width || !(channels == 1 ? oc == 1 : oc == 3 || oc == 4) ||
        !PyBuffer_IsContiguous(&out, 'C') || out.len != (Py_ssize_t)bx.oh * bx.ow * oc) {
        PyErr_SetString(PyExc_ValueError, "decode_box: out does not fit the box and channels");
        goto done;
    }
    char why[160] = "";
    long got;
    Py_BEGIN_ALLOW_THREADS
    got = decode(d, len, (uint8_t *)scratch.buf, (size_t)scratch.len, (uint8_t *)out.buf, &bx,
                 why, sizeof why);
    Py_END_ALLOW_THREADS
    if (got == -2)
        PyErr_NoMemory();
    else if (got < 0)
        PyErr_SetString(Corrupt, why);
    else
        result = PyLong_FromLong(got);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&scratch);
    PyBuffer_Release(&out);
    return result;
}

/* -- rgbx_to_rgb ----------------------------------------------------------------------------
 * C-contiguous (h, w, 4) RGBX pixels -> (h, w, 3) RGB, or three (h, w) planes one after
 * another (a channels-first batch row), mirrored left to right if `flip`. */
CLONES static void planes_row(const uint32_t *s, uint8_t *r, uint8_t *g, uint8_t *b, long w)
{
    for (long x = 0; x < w; x++) {
        uint32_t v = s[x];
        r[x] = (uint8_t)v, g[x] = (uint8_t)(v >> 8), b[x] = (uint8_t)(v >> 16);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
typedef uint8_t v16u8 __attribute__((vector_size(16)));
#endif

/* RGBX -> RGB: 4 pixels (16 bytes) shuffled to 12 and stored as 16 (the last 4 bytes are
   overwritten by the next store), then the last pixels one by one */
CLONES static void rgb_row(const uint32_t *s, uint8_t *o, long w)
{
    long x = 0;
#if defined(__GNUC__) && !defined(__clang__)
    const v16u8 pick = {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 15, 15, 15, 15};
    for (; x + 6 <= w; x += 4) { /* 16 bytes stored at 3x: inside the row while x + 6 <= w */
        v16u8 v;
        memcpy(&v, s + x, 16);
        v = __builtin_shuffle(v, pick);
        memcpy(o + 3 * x, &v, 16);
    }
#endif
    for (; x < w; x++) {
        uint32_t v = s[x];
        o[3 * x] = (uint8_t)v, o[3 * x + 1] = (uint8_t)(v >> 8), o[3 * x + 2] = (uint8_t)(v >> 16);
    }
}

/* a mirrored row: one reversed copy of whole pixels (vectorized as a permute), then the planes
   (reading one pixel and writing three bytes backwards does not vectorize) */
CLONES static void reverse_row(const uint32_t *s, uint32_t *t, long w)
{
    for (long x = 0; x < w; x++)
        t[x] = s[w - 1 - x];
}

static PyObject *rgbx_to_rgb(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer src, dst;
    long h, w;
    int flip, planar;
    if (!PyArg_ParseTuple(args, "y*w*llpp", &src, &dst, &h, &w, &flip, &planar))
        return NULL;
    PyObject *result = NULL;
    if (h < 1 || w < 1 || !PyBuffer_IsContiguous(&src, 'C') ||
        !PyBuffer_IsContiguous(&dst, 'C') || src.len != (Py_ssize_t)h * w * 4 ||
        dst.len != (Py_ssize_t)h * w * 3 || ((uintptr_t)src.buf & 3) != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "rgbx_to_rgb: src must be aligned C-contiguous (h, w, 4), dst h * w * 3 bytes");
        goto done;
    }
    uint32_t *mirrored = flip ? (uint32_t *)malloc(sizeof(uint32_t) * (size_t)w) : NULL;
    if (flip && mirrored == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    uint8_t *o = (uint8_t *)dst.buf;
    size_t plane = (size_t)h * (size_t)w;
    for (long y = 0; y < h; y++) {
        size_t row = (size_t)y * (size_t)w;
        const uint32_t *s = (const uint32_t *)src.buf + row;
        if (flip) {
            reverse_row(s, mirrored, w);
            s = mirrored;
        }
        if (planar)
            planes_row(s, o + row, o + plane + row, o + 2 * plane + row, w);
        else
            rgb_row(s, o + 3 * row, w);
    }
    Py_END_ALLOW_THREADS
    free(mirrored);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_box", decode_box, METH_VARARGS,
     "decode_box(data, scratch, out, top, left, out_h, out_w, out_channels) -> int\n"
     "Decode a box of yuv420 bytes into `out` (1: gray, 3: RGB, 4: RGBX bytes a pixel),\n"
     "decompressing its bands into `scratch`: 0, or the scratch bytes needed when it is too\n"
     "small (nothing done). Corrupt (a ValueError) for bytes that are not a yuv420 image."},
    {"set_lz4", set_lz4, METH_O,
     "set_lz4(address)\n"
     "Decompress with the LZ4_decompress_safe at `address` (0: the module's own decoder)."},
    {"rgbx_to_rgb", rgbx_to_rgb, METH_VARARGS,
     "rgbx_to_rgb(src, dst, h, w, flip, planar)\n"
     "(h, w, 4) RGBX pixels into (h, w, 3) RGB, or three (h, w) planes if `planar`,\n"
     "mirrored if `flip`."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_yuv",
                                    "YUV 4:2:0 to RGB (libjpeg's arithmetic).", -1, methods};

PyMODINIT_FUNC PyInit__yuv(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Corrupt = PyErr_NewException("chunkio.images._yuv.Corrupt", PyExc_ValueError, NULL);
    if (Corrupt == NULL || PyModule_AddObjectRef(m, "Corrupt", Corrupt) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
