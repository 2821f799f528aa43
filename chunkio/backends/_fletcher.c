/* The sums behind HDF5's Fletcher-32 (chunkio/backends/_checksum.py gives the arithmetic), in
 * one pass that the compiler vectorizes.
 *
 * sums(buffer) -> (total, weighted, nonzero) over the buffer's whole little-endian 16-bit
 * words w_i: total = sum w_i and weighted = sum i * w_i, both modulo 65535, and whether any
 * word is non-zero.  _checksum.py turns them into HDF5's checksum (big-endian words: 256 times
 * these modulo 65535; the odd last byte).
 *
 * HDF5's loop adds one word and then the running sum, word after word: a chain of dependent
 * adds.  Here 16 interleaved lanes keep their own sums (a word at lane k of row r: a_k += w,
 * b_k += a_k), independent of each other, so the adds run 4-8 at once (-O3; AVX2 clones where
 * the CPU has it); every ROWS rows the lanes are folded into the totals modulo 65535 before
 * their 32-bit sums can overflow (a_k < ROWS * 65535, b_k < ROWS * (ROWS + 1) / 2 * 65535).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define LANES 16
#define ROWS 256
#define P 65535u

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

/* the lanes' sums of `rows` rows from `w` into (*total, *weighted) modulo P; word i of the
 * block is w[i], its index in the buffer base + i */
CLONES static void block(const uint16_t *w, size_t rows, uint64_t base, uint64_t *total,
                         uint64_t *weighted, unsigned *any)
{
    uint32_t a[LANES] = {0}, b[LANES] = {0}, or_[LANES] = {0};
    for (size_t r = 0; r < rows; r++) {
        const uint16_t *row = w + r * LANES;
        for (int k = 0; k < LANES; k++) {
            a[k] += row[k];
            b[k] += a[k];
            or_[k] |= row[k];
        }
    }
    /* b_k = sum_r (rows - r) w_rk, so sum_r r w_rk = rows a_k - b_k; word index base + LANES r
     * + k: sum i w = sum_k (base + k) a_k + LANES (rows a_k - b_k) */
    uint64_t t = *total, s = *weighted;
    for (int k = 0; k < LANES; k++) {
        uint64_t ak = a[k] % P, bk = b[k] % P;
        t += ak;
        s += ((base + (uint64_t)k) % P) * ak % P;
        s += (uint64_t)LANES * ((rows % P) * ak % P + P - bk) % P;
        *any |= or_[k];
    }
    *total = t % P;
    *weighted = s % P;
}

static PyObject *sums(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    size_t words = (size_t)view.len / 2;
    uint64_t total = 0, weighted = 0;
    unsigned any = 0;
    const unsigned char *bytes = (const unsigned char *)view.buf;
    Py_BEGIN_ALLOW_THREADS
    uint16_t tile[ROWS * LANES];
    size_t step = (size_t)ROWS * LANES;
    for (size_t start = 0; start < words; start += step) {
        size_t n = words - start < step ? words - start : step;
        size_t rows = n / LANES;
        /* copied into an aligned tile: the buffer's bytes may sit at any address (memcpy is
         * the portable unaligned load), the tail row padded with zero words */
        memcpy(tile, bytes + 2 * start, 2 * n);
        if (n % LANES) {
            memset(tile + n, 0, 2 * (LANES - n % LANES));
            rows++;
        }
        block(tile, rows, start, &total, &weighted, &any);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(KKO)", (unsigned long long)total, (unsigned long long)weighted,
                         any ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"sums", sums, METH_O,
     "sums(buffer) -> (total, weighted, nonzero)\n"
     "Over the buffer's whole little-endian 16-bit words: their sum and the sum of each\n"
     "times its index, both modulo 65535, and whether any is non-zero."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fletcher",
                                    "The sums of HDF5's Fletcher-32 checksum.", -1, methods};

PyMODINIT_FUNC PyInit__fletcher(void) { return PyModule_Create(&module); }
