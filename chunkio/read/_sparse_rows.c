/* Sparse rows scattered into a dense batch in one pass (chunkio/read/sparse.py: the NumPy
 * path it replaces, and stays the fallback without a C compiler).
 *
 * dense(out, n_rows, n_cols, itemsize, add_kind, data, data_slots, data_base, data_step,
 *       indices, index_size, index_slots, index_base, index_step, rows, starts, counts)
 *   -> None | (row, column) | False
 *
 * `data` and `indices` are the decoded-chunk caches of a CSR matrix's two value arrays: value
 * p of the matrix lies in chunk c = p / step, at slot slots[c - base] of its cache, position
 * slot * step + p % step.  Held row r (a row that stores values) is batch row rows[r] (rising),
 * its values p = starts[r] .. starts[r] + counts[r] - 1.  `out` (n_rows x n_cols, C order, the
 * data's dtype) is zeroed, a row just before its values are written, and each value written to
 * out[row, column]:
 *
 * - assigned, while every row's columns rise (a canonical CSR matrix), as NumPy's one flat
 *   assignment does: a stored -0.0 stays -0.0;
 * - else the whole batch again, added (duplicate columns of a row add up, as np.add.at and
 *   scipy's toarray() do: 0.0 + -0.0 is +0.0 there too); integers wrap as NumPy's do.
 *   add_kind says how: 1 float32, 2 float64, 3 integers (any width, in unsigned arithmetic:
 *   the same bits as NumPy's wrap), 0 none here (bool, float16): False, NumPy adds them.
 *
 * A column outside [0, n_cols) stops the scatter: (batch row, column) of the first in batch
 * order, for the caller's FormatError; `out` then holds a part of the batch.  A position
 * outside a cache (slots that do not match the chunks) is a ValueError, never a stray read.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { DONE = 0, UNSORTED = 1, BAD_COLUMN = 2, BAD_PLAN = 3 };

typedef struct {
    const char *buf;
    Py_ssize_t len; /* values */
    const int64_t *slots;
    Py_ssize_t nslots;
    int64_t base, step;
} cached;

typedef struct {
    char *out;
    int64_t n_rows, n_cols;
    cached data, index;
    const int64_t *rows, *starts, *counts;
    Py_ssize_t held;
    /* the first bad column: its batch row and value */
    int64_t bad_row, bad_column;
} job;

/* where value `pos` lies in cache `c`, and how many values from it on lie in the same chunk;
 * -1 where the slots do not hold its chunk */
static inline int64_t locate(const cached *c, int64_t pos, int64_t *run)
{
    int64_t chunk = pos / c->step, within = pos - chunk * c->step;
    int64_t k = chunk - c->base;
    if (k < 0 || k >= c->nslots || c->slots[k] < 0 || c->slots[k] > c->len / c->step)
        return -1;
    int64_t at = c->slots[k] * c->step + within;
    *run = c->step - within;
    if (at + *run > c->len) /* the last slot of a cache may be the array's short last chunk */
        *run = c->len - at;
    return *run > 0 ? at : -1;
}

/* rows [from, to) of out zeroed: each just before its values are written, while it is in
 * the CPU's cache (zeroing the whole batch first would write it out to memory and back) */
static inline void zero_rows(job *j, int64_t from, int64_t to, size_t item)
{
    if (to > from)
        memset(j->out + (size_t)from * (size_t)j->n_cols * item, 0,
               (size_t)(to - from) * (size_t)j->n_cols * item);
}

/* one pass over the batch with value type VT, index type IT: ASSIGN (stops at the first
 * column that does not rise) or ADD */
#define SCATTER(NAME, VT, IT, ADD)                                                            \
    static int NAME(job *j)                                                                   \
    {                                                                                         \
        int64_t zeroed = 0; /* rows before it are zeroed (ADD: all, before the pass) */        \
        for (Py_ssize_t r = 0; r < j->held; r++) {                                            \
            VT *row = (VT *)j->out + j->rows[r] * j->n_cols;                                  \
            if (!(ADD)) {                                                                     \
                zero_rows(j, zeroed, j->rows[r] + 1, sizeof(VT));                             \
                zeroed = j->rows[r] + 1;                                                      \
            }                                                                                 \
            int64_t pos = j->starts[r], left = j->counts[r], prev = -1;                       \
            while (left > 0) {                                                                \
                int64_t drun = 0, irun = 0;                                                   \
                int64_t dat = locate(&j->data, pos, &drun);                                   \
                int64_t iat = locate(&j->index, pos, &irun);                                  \
                if (dat < 0 || iat < 0)                                                       \
                    return BAD_PLAN;                                                          \
                int64_t n = left < drun ? left : drun;                                        \
                n = n < irun ? n : irun;                                                      \
                const VT *v = (const VT *)j->data.buf + dat;                                  \
                const IT *c = (const IT *)j->index.buf + iat;                                 \
                for (int64_t k = 0; k < n; k++) {                                             \
                    int64_t col = (int64_t)c[k];                                              \
                    if (col < 0 || col >= j->n_cols) {                                        \
                        j->bad_row = j->rows[r];                                              \
                        j->bad_column = col;                                                  \
                        return BAD_COLUMN;                                                    \
                    }                                                                         \
                    if (ADD) {                                                                \
                        row[col] = (VT)(row[col] + v[k]);                                     \
                    } else {                                                                  \
                        if (col <= prev)                                                      \
                            return UNSORTED;                                                  \
                        prev = col;                                                           \
                        row[col] = v[k];                                                      \
                    }                                                                         \
                }                                                                             \
                pos += n;                                                                     \
                left -= n;                                                                    \
            }                                                                                 \
        }                                                                                     \
        if (!(ADD))                                                                           \
            zero_rows(j, zeroed, j->n_rows, sizeof(VT));                                      \
        return DONE;                                                                          \
    }

#define BY_INDEX(PREFIX, VT, ADD)                                                             \
    SCATTER(PREFIX##_i32, VT, int32_t, ADD)                                                   \
    SCATTER(PREFIX##_i64, VT, int64_t, ADD)

BY_INDEX(assign8, uint8_t, 0)
BY_INDEX(assign16, uint16_t, 0)
BY_INDEX(assign32, uint32_t, 0)
BY_INDEX(assign64, uint64_t, 0)
BY_INDEX(add_f32, float, 1)
BY_INDEX(add_f64, double, 1)
BY_INDEX(add_u8, uint8_t, 1)
BY_INDEX(add_u16, uint16_t, 1)
BY_INDEX(add_u32, uint32_t, 1)
BY_INDEX(add_u64, uint64_t, 1)

typedef int (*pass)(job *);

static pass assign_pass(Py_ssize_t item, int wide)
{
    switch (item) {
    case 1: return wide ? assign8_i64 : assign8_i32;
    case 2: return wide ? assign16_i64 : assign16_i32;
    case 4: return wide ? assign32_i64 : assign32_i32;
    case 8: return wide ? assign64_i64 : assign64_i32;
    }
    return NULL;
}

static pass add_pass(int kind, Py_ssize_t item, int wide)
{
    if (kind == 1 && item == 4)
        return wide ? add_f32_i64 : add_f32_i32;
    if (kind == 2 && item == 8)
        return wide ? add_f64_i64 : add_f64_i32;
    if (kind == 3) {
        switch (item) {
        case 1: return wide ? add_u8_i64 : add_u8_i32;
        case 2: return wide ? add_u16_i64 : add_u16_i32;
        case 4: return wide ? add_u32_i64 : add_u32_i32;
        case 8: return wide ? add_u64_i64 : add_u64_i32;
        }
    }
    return NULL;
}

/* a contiguous, aligned buffer of whole items of `item` bytes */
static int get(PyObject *obj, Py_buffer *view, Py_ssize_t item, int writable, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (view->len % item || (uintptr_t)view->buf % (uintptr_t)item) {
        PyErr_Format(PyExc_ValueError, "%s: a contiguous, aligned buffer of %zd-byte items", what,
                     item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *dense(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *o_out, *o_data, *o_dslots, *o_index, *o_islots, *o_rows, *o_starts, *o_counts;
    Py_ssize_t n_rows, n_cols, item, isize;
    int add_kind;
    long long dbase, dstep, ibase, istep;
    if (!PyArg_ParseTuple(args, "OnnniOOLLOnOLLOOO", &o_out, &n_rows, &n_cols, &item, &add_kind,
                          &o_data, &o_dslots, &dbase, &dstep, &o_index, &isize, &o_islots,
                          &ibase, &istep, &o_rows, &o_starts, &o_counts))
        return NULL;
    if (n_rows < 0 || n_cols < 0 || dstep <= 0 || istep <= 0 || (isize != 4 && isize != 8) ||
        assign_pass(item, 0) == NULL || dbase < 0 || ibase < 0 ||
        (n_cols && n_rows > PY_SSIZE_T_MAX / n_cols / item)) {
        PyErr_SetString(PyExc_ValueError, "dense: bad sizes");
        return NULL;
    }
    Py_buffer v[8];
    PyObject *objs[8] = {o_out, o_data, o_index, o_dslots, o_islots, o_rows, o_starts, o_counts};
    Py_ssize_t items[8] = {item, item, isize, 8, 8, 8, 8, 8};
    const char *names[8] = {"out", "data", "indices", "data slots", "index slots",
                            "rows", "starts", "counts"};
    int got = 0;
    for (; got < 8; got++)
        if (get(objs[got], &v[got], items[got], got == 0, names[got]) < 0)
            goto release;
    job j;
    j.out = (char *)v[0].buf;
    j.n_rows = n_rows;
    j.n_cols = n_cols;
    j.data = (cached){(const char *)v[1].buf, v[1].len / item, (const int64_t *)v[3].buf,
                      v[3].len / 8, dbase, dstep};
    j.index = (cached){(const char *)v[2].buf, v[2].len / isize, (const int64_t *)v[4].buf,
                       v[4].len / 8, ibase, istep};
    j.rows = (const int64_t *)v[5].buf;
    j.starts = (const int64_t *)v[6].buf;
    j.counts = (const int64_t *)v[7].buf;
    j.held = v[5].len / 8;
    if (v[6].len / 8 != j.held || v[7].len / 8 != j.held || v[0].len != n_rows * n_cols * item) {
        PyErr_SetString(PyExc_ValueError,
                        "dense: out is not n_rows x n_cols, or rows, starts and counts differ");
        goto release;
    }
    for (Py_ssize_t r = 0; r < j.held; r++) {
        if (j.rows[r] < 0 || j.rows[r] >= n_rows || (r && j.rows[r] <= j.rows[r - 1]) ||
            j.counts[r] < 0 || j.starts[r] < 0) {
            PyErr_SetString(PyExc_ValueError,
                            "dense: rows not rising inside out, or a negative range");
            goto release;
        }
    }
    int wide = isize == 8, status;
    pass add = add_pass(add_kind, item, wide);
    Py_BEGIN_ALLOW_THREADS
    status = assign_pass(item, wide)(&j);
    if (status == UNSORTED && add != NULL) {
        memset(j.out, 0, (size_t)v[0].len);
        status = add(&j);
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (status == DONE) {
        result = Py_None;
        Py_INCREF(result);
    } else if (status == UNSORTED) { /* a row repeats a column, of a dtype NumPy adds here */
        result = Py_False;
        Py_INCREF(result);
    } else if (status == BAD_COLUMN) {
        result = Py_BuildValue("(LL)", (long long)j.bad_row, (long long)j.bad_column);
    } else {
        PyErr_SetString(PyExc_ValueError, "dense: a value's chunk is not in its cache's slots");
    }
    while (got--)
        PyBuffer_Release(&v[got]);
    return result;
release:
    while (got--)
        PyBuffer_Release(&v[got]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"dense", dense, METH_VARARGS,
     "dense(out, n_rows, n_cols, itemsize, add_kind, data, data_slots, data_base, data_step,\n"
     "      indices, index_size, index_slots, index_base, index_step, rows, starts, counts)\n"
     "Zero out and scatter the held rows' cached values into it: None when done, (row,\n"
     "column) at the first column outside the matrix, False where a row repeats a column\n"
     "of a dtype added by NumPy instead."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sparse_rows",
                                    "Sparse rows scattered into dense batches.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sparse_rows(void) { return PyModule_Create(&module); }
