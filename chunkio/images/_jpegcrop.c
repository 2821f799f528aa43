/* Decode one rectangle of a JPEG with libjpeg-turbo: the iMCU rows and columns that cover it.
 *
 * decode_region(data, out, gray, denom, height, width, x0, y0) writes the pixels
 * [y0, y0 + out_h) x [x0, x0 + out_w) of the image decoded at scale 1/denom (coordinates in
 * that scaled image) into `out`, a C-contiguous uint8 buffer of out_h * out_w * channels bytes
 * (the caller gives out_h and out_w as out's shape).  The pixels equal a full decode at the
 * same scale cut to the same box, because nothing at the box's edges is decoded as an edge:
 *
 *   - columns: jpeg_crop_scanline widens the region to iMCU boundaries, and libjpeg-turbo
 *     upsamples the chroma at the edges of a cropped region as if they were the image's
 *     edges.  The region asked for is therefore one iMCU wider on each side (where the
 *     image goes on), so that the replicated edge columns fall outside the box;
 *   - rows: jpeg_skip_scanlines skips whole iMCU rows (entropy decoding only), stopping one
 *     iMCU row above the box; the rows from there to the box are decoded and dropped, so the
 *     box's first row gets the same context rows (fancy vertical upsampling) as in a full
 *     decode.  Rows below the box are never decoded.
 *
 * Strict as simplejpeg's strict=True: every libjpeg warning (corrupt data, premature end) is
 * an error, raised as ValueError.  Data that does not end with the EOI marker is decoded to
 * its last row (and finished), so a truncated file fails exactly where a full decode fails;
 * otherwise the decode stops after the box (rows below it are not checked).
 *
 * The header's size must be (height, width) at full scale: a corrupt header cannot make
 * libjpeg allocate for an image larger than the one the caller expects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

struct error_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo)
{
    struct error_mgr *err = (struct error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
    if (level < 0) /* a warning: corrupt data; strict decoding makes it an error */
        on_error(cinfo);
}

static void no_output(j_common_ptr cinfo) { (void)cinfo; }

/* What one decode needs besides libjpeg's state; everything freed in one place. */
struct job {
    const unsigned char *data;
    unsigned long size;
    unsigned char *out;
    int gray, denom;
    long height, width;     /* expected full-scale size */
    long x0, y0, oh, ow;    /* the box, in scaled pixels */
    int channels;
    JSAMPLE *rows;          /* scratch rows of the widened region */
    JSAMPROW *pointers;
};

/* Returns 0 on success, else 1 with err->message set (or a short message in `fail`). */
static int run(struct job *job, struct jpeg_decompress_struct *cinfo, struct error_mgr *err,
               const char **fail)
{
    jpeg_mem_src(cinfo, job->data, job->size);
    jpeg_read_header(cinfo, TRUE);
    if ((long)cinfo->image_height != job->height || (long)cinfo->image_width != job->width) {
        *fail = "the JPEG header's size is not the stored shape";
        return 1;
    }
    cinfo->out_color_space = job->gray ? JCS_GRAYSCALE : JCS_RGB;
    cinfo->scale_num = 1;
    cinfo->scale_denom = (unsigned int)job->denom;
    cinfo->dct_method = JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    jpeg_start_decompress(cinfo);
    if (cinfo->output_components != job->channels) {
        *fail = "unexpected number of output components";
        return 1;
    }
    long out_h = (long)cinfo->output_height, out_w = (long)cinfo->output_width;
    if (job->x0 < 0 || job->y0 < 0 || job->ow < 1 || job->oh < 1 ||
        job->x0 + job->ow > out_w || job->y0 + job->oh > out_h) {
        *fail = "the box is not inside the scaled image";
        return 1;
    }
    /* one iMCU in output pixels, across and down */
    int unit = cinfo->num_components == 1 ? 1 : 0;
    long imcu_w = (long)cinfo->min_DCT_scaled_size * (unit ? 1 : cinfo->max_h_samp_factor);
    long imcu_h = (long)cinfo->min_DCT_scaled_size * (unit ? 1 : cinfo->max_v_samp_factor);
    JDIMENSION xoff = (JDIMENSION)(job->x0 > imcu_w ? job->x0 - imcu_w : 0);
    long right = job->x0 + job->ow + imcu_w;
    if (right > out_w)
        right = out_w;
    JDIMENSION cw = (JDIMENSION)(right - (long)xoff);
    if (xoff != 0 || cw != (JDIMENSION)out_w)
        jpeg_crop_scanline(cinfo, &xoff, &cw);
    long row_bytes = (long)cw * job->channels;
    /* up to an iMCU row per call: libjpeg hands over whole row groups without its spare-row
       copy; rows of the box go straight into out when the region is exactly the box's width */
    int batch = (int)imcu_h < 16 ? 16 : (int)imcu_h;
    job->rows = (JSAMPLE *)malloc((size_t)row_bytes * (size_t)batch);
    job->pointers = (JSAMPROW *)malloc(sizeof(JSAMPROW) * (size_t)batch);
    if (job->rows == NULL || job->pointers == NULL) {
        *fail = "out of memory";
        return 1;
    }
    /* whole iMCU rows above the box, less one, are skipped */
    long skip = (job->y0 / imcu_h - 1) * imcu_h;
    if (skip > 0)
        jpeg_skip_scanlines(cinfo, (JDIMENSION)skip);
    long cut = (job->x0 - (long)xoff) * job->channels, keep = job->ow * job->channels;
    int direct = cut == 0 && keep == row_bytes;
    long stop = job->y0 + job->oh;
    int ends = job->size >= 2 && job->data[job->size - 2] == 0xFF &&
               job->data[job->size - 1] == 0xD9;
    long last = ends ? stop : out_h;
    while ((long)cinfo->output_scanline < last) {
        long first = (long)cinfo->output_scanline;
        int want = batch;
        if (first + want > last)
            want = (int)(last - first);
        for (int k = 0; k < want; k++) {
            long y = first + k;
            job->pointers[k] = direct && y >= job->y0 && y < stop
                                   ? job->out + (size_t)(y - job->y0) * (size_t)keep
                                   : job->rows + (size_t)k * (size_t)row_bytes;
        }
        JDIMENSION got = jpeg_read_scanlines(cinfo, job->pointers, (JDIMENSION)want);
        if (!direct) {
            for (long k = 0; k < (long)got; k++) {
                long y = first + k;
                if (y >= job->y0 && y < stop)
                    memcpy(job->out + (size_t)(y - job->y0) * (size_t)keep,
                           job->pointers[k] + cut, (size_t)keep);
            }
        }
        if (got == 0) {
            *fail = "no rows decoded";
            return 1;
        }
    }
    if (ends)
        jpeg_abort_decompress(cinfo);
    else
        jpeg_finish_decompress(cinfo);
    (void)err;
    return 0;
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer data, out;
    int gray, denom;
    long height, width, x0, y0, oh, ow;
    if (!PyArg_ParseTuple(args, "y*w*pillllll", &data, &out, &gray, &denom, &height, &width,
                          &x0, &y0, &oh, &ow))
        return NULL;
    PyObject *result = NULL;
    int channels = gray ? 1 : 3;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyErr_Format(PyExc_ValueError, "scale denominator must be 1, 2, 4 or 8, got %d", denom);
        goto done;
    }
    if (!PyBuffer_IsContiguous(&out, 'C') || out.len != (Py_ssize_t)oh * ow * channels ||
        oh < 1 || ow < 1) {
        PyErr_SetString(PyExc_ValueError, "out must be a C-contiguous buffer of the box's size");
        goto done;
    }
    struct job job = {.data = (const unsigned char *)data.buf,
                      .size = (unsigned long)data.len,
                      .out = (unsigned char *)out.buf,
                      .gray = gray,
                      .denom = denom,
                      .height = height,
                      .width = width,
                      .x0 = x0,
                      .y0 = y0,
                      .oh = oh,
                      .ow = ow,
                      .channels = channels,
                      .rows = NULL,
                      .pointers = NULL};
    struct jpeg_decompress_struct cinfo;
    struct error_mgr err;
    const char *fail = NULL;
    int failed;
    err.message[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.pub.output_message = no_output;
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&cinfo);
        failed = run(&job, &cinfo, &err, &fail);
    }
    jpeg_destroy_decompress(&cinfo);
    free(job.rows);
    free(job.pointers);
    Py_END_ALLOW_THREADS
    if (failed)
        PyErr_SetString(PyExc_ValueError, fail != NULL ? fail : err.message);
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, out, gray, denom, height, width, x0, y0, out_h, out_w)\n"
     "Decode the box [y0, y0+out_h) x [x0, x0+out_w) of the JPEG `data` at scale 1/denom\n"
     "into `out`; the header must say height x width. ValueError on corrupt data."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegcrop",
                                    "Partial JPEG decode (libjpeg-turbo).", -1, methods};

PyMODINIT_FUNC PyInit__jpegcrop(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER",
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
                                             LIBJPEG_TURBO_VERSION_NUMBER
#else
                                             0
#endif
                                             ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
