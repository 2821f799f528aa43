/* Decode one rectangle of a JPEG with libjpeg-turbo: the iMCU rows and columns that cover it.
 *
 * decode_region(data, out, gray, denom, height, width, x0, y0) writes the pixels
 * [y0, y0 + out_h) x [x0, x0 + out_w) of the image decoded at scale 1/denom (coordinates in
 * that scaled image) into `out`, a C-contiguous uint8 buffer of out_h * out_w * channels bytes
 * (the caller gives out_h and out_w as out's shape; 4 channels: RGBX, libjpeg-turbo's
 * JCS_EXT_RGBX, the same RGB and 255).  The pixels equal a full decode at the
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
 * an error, raised as ValueError.  The rows below the box are entropy-decoded to the end of
 * the data (jpeg_skip_scanlines: no IDCT, no upsampling), so a corrupt or truncated file is
 * refused wherever the damage is, as the whole-image decode refuses it.  Files whose
 * components or sampling factors the whole-image decode (TurboJPEG) reads otherwise or not at
 * all raise NotImplementedError: the caller leaves them to it (whole_kind).
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

#include "_jpegcrop_dl.h" /* linked at build time, or bound at import */

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
    unsigned char *seek;    /* the stream from a restart marker on (see seek_rows), or NULL */
    int seek_ok;            /* whether to look for restart markers to seek to */
};

/* Restart markers at every iMCU row (DRI = the MCUs of one row, as add_restarts writes):
 * the entropy-coded data of iMCU row k starts right after the k-th RST marker, with the DC
 * predictions reset.  seek_rows builds a stream that is the file's headers (the frame's
 * height cut to rows [first, last) ) and that data for rows first..last-1 only, its RST
 * markers renumbered from 0, so libjpeg decodes just those rows: the rows above the box are
 * not even Huffman-decoded.  Returns the new stream's size, or 0 where the file is not laid
 * out so (the caller decodes it the usual way, which judges it). */
static unsigned long seek_rows(struct job *job, struct jpeg_decompress_struct *cinfo,
                               long first, long last, long total, long row_px)
{
    const unsigned char *d = job->data;
    unsigned long size = job->size;
    unsigned long head = (unsigned long)(cinfo->src->next_input_byte - d);
    if (head < 4 || head >= size || first <= 0)
        return 0;
    /* the SOF segment's height field, among the header's marker segments */
    unsigned long pos = 2, sof = 0;
    while (pos + 4 <= head) {
        if (d[pos] != 0xFF)
            return 0;
        unsigned marker = d[pos + 1];
        if (marker == 0xFF) { pos++; continue; }
        unsigned long len = ((unsigned long)d[pos + 2] << 8) | d[pos + 3];
        if (marker == 0xC0 || marker == 0xC1)
            sof = pos + 5;
        if (marker == 0xDA)
            break;
        pos += 2 + len;
    }
    if (sof == 0 || sof + 2 > head)
        return 0;
    /* find the RST markers that open rows first and (if not the end) last */
    unsigned long start = 0, stop = 0;
    long seen = 0;
    for (unsigned long i = head; i + 1 < size; i++) {
        if (d[i] != 0xFF)
            continue;
        unsigned m = d[i + 1];
        if (m == 0x00 || m == 0xFF)
            continue;
        if (m == 0xD9 && start != 0 && last >= total)
            break; /* the end of the image: the rows from `first` on are all kept */
        if (m < 0xD0 || m > 0xD7 || (long)(m - 0xD0) != seen % 8)
            return 0; /* EOI before the rows, or not laid out as expected */
        seen++;
        if (seen == first)
            start = i + 2;
        if (seen == last) {
            stop = i;
            break;
        }
        i++;
    }
    if (start == 0)
        return 0;
    if (last >= total)
        stop = size - 2; /* to the EOI marker (the caller checked it is there) */
    if (stop == 0 || stop < start)
        return 0;
    unsigned long n = head + (stop - start) + 2;
    unsigned char *buf = (unsigned char *)malloc(n);
    if (buf == NULL)
        return 0;
    memcpy(buf, d, head);
    long rows = (last - first) * row_px;
    if (last >= total)
        rows = job->height - first * row_px;
    buf[sof] = (unsigned char)(rows >> 8);
    buf[sof + 1] = (unsigned char)(rows & 0xFF);
    memcpy(buf + head, d + start, stop - start);
    long k = 0; /* renumber the markers between the rows kept */
    for (unsigned long i = head; i + 1 < head + (stop - start); i++) {
        if (buf[i] == 0xFF && buf[i + 1] >= 0xD0 && buf[i + 1] <= 0xD7) {
            buf[i + 1] = (unsigned char)(0xD0 + k % 8);
            k++;
            i++;
        } else if (buf[i] == 0xFF) {
            i++;
        }
    }
    buf[n - 2] = 0xFF;
    buf[n - 1] = 0xD9;
    job->seek = buf;
    return n;
}

/* Whether the components' sampling factors are of a kind the whole-image decode
 * (simplejpeg: TurboJPEG, which names each kind it decodes) reads, and the same way: gray, or
 * luma 1x1, 2x1, 2x2, 1x2 or 4x1 over 1x1 chroma.  Others (4x2, 2x4, 3x1, chroma sampled
 * finer than luma, CMYK, ...) TurboJPEG refuses, or (1x4, factors all equal) reads only in
 * some versions: decoding them here would read files the whole-image path refuses. */
static int whole_kind(const struct jpeg_decompress_struct *cinfo)
{
    if (cinfo->num_components == 1)
        return 1;
    if (cinfo->num_components != 3)
        return 0;
    for (int c = 1; c < 3; c++)
        if (cinfo->comp_info[c].h_samp_factor != 1 || cinfo->comp_info[c].v_samp_factor != 1)
            return 0;
    int h = cinfo->comp_info[0].h_samp_factor, v = cinfo->comp_info[0].v_samp_factor;
    return (h == 1 && v == 1) || (h == 2 && v == 1) || (h == 2 && v == 2) ||
           (h == 1 && v == 2) || (h == 4 && v == 1);
}

/* Returns 0 on success, else 1 with err->message set (or a short message in `fail`), or 2
 * (`fail` set) for a file left to the whole-image decode. */
static int run(struct job *job, struct jpeg_decompress_struct *cinfo, struct error_mgr *err,
               const char **fail)
{
    jpeg_mem_src(cinfo, job->data, job->size);
    jpeg_read_header(cinfo, TRUE);
    if ((long)cinfo->image_height != job->height || (long)cinfo->image_width != job->width) {
        *fail = "the JPEG header's size is not the stored shape";
        return 1;
    }
    if (!whole_kind(cinfo)) {
        *fail = "components or sampling factors left to the whole-image decode";
        return 2;
    }
    int ends = job->size >= 2 && job->data[job->size - 2] == 0xFF &&
               job->data[job->size - 1] == 0xD9;
    int comps = cinfo->num_components;
    if (ends && job->seek_ok && !cinfo->progressive_mode && cinfo->comps_in_scan == comps &&
        (comps == 1 || comps == 3)) {
        int hs = 1, vs = 1;
        for (int c = 0; comps == 3 && c < 3; c++) {
            if (cinfo->comp_info[c].h_samp_factor > hs)
                hs = cinfo->comp_info[c].h_samp_factor;
            if (cinfo->comp_info[c].v_samp_factor > vs)
                vs = cinfo->comp_info[c].v_samp_factor;
        }
        long row_px = 8L * vs, col_px = 8L * hs;
        long per_row = (job->width + col_px - 1) / col_px;
        long total = (job->height + row_px - 1) / row_px;
        long scaled = row_px / job->denom; /* one iMCU row in scaled pixels */
        long first = job->y0 / scaled - 1;  /* one row of context above the box */
        long last = (job->y0 + job->oh - 1) / scaled + 2; /* and one below */
        if (last > total)
            last = total;
        if ((long)cinfo->restart_interval == per_row && first > 0) {
            unsigned long n = seek_rows(job, cinfo, first, last, total, row_px);
            if (n > 0) {
                jpeg_abort_decompress(cinfo);
                jpeg_mem_src(cinfo, job->seek, n);
                jpeg_read_header(cinfo, TRUE);
                job->y0 -= first * scaled; /* the box in the rows of the new stream */
            }
        }
    }
#ifdef JCS_EXTENSIONS
    cinfo->out_color_space = job->gray ? JCS_GRAYSCALE : job->channels == 4 ? JCS_EXT_RGBX : JCS_RGB;
#else
    if (job->channels == 4) { /* a libjpeg without libjpeg-turbo's extensions */
        *fail = "RGBX output needs libjpeg-turbo";
        return 1;
    }
    cinfo->out_color_space = job->gray ? JCS_GRAYSCALE : JCS_RGB;
#endif
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
    long last = stop;
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
    /* The rows below the box are entropy-decoded (no IDCT, no colour), to the end of the
       data: corrupt or truncated data there is refused as the whole-image decode refuses it.
       Skipping to the last row, not past it (which libjpeg takes as "stop here"), then
       reading that row makes finish_decompress read on to the end-of-image marker. */
    long below = out_h - 1 - (long)cinfo->output_scanline;
    if (below > 0)
        jpeg_skip_scanlines(cinfo, (JDIMENSION)below);
    while ((long)cinfo->output_scanline < out_h) {
        job->pointers[0] = job->rows;
        if (jpeg_read_scanlines(cinfo, job->pointers, 1) == 0) {
            *fail = "no rows decoded";
            return 1;
        }
    }
    (void)ends;
    jpeg_finish_decompress(cinfo);
    (void)err;
    return 0;
}

static PyObject *decode_region(PyObject *self, PyObject *args)
{
    (void)self;
    if (!libjpeg_ready())
        return NULL;
    Py_buffer data, out;
    int gray, denom, seek_ok = 1;
    long height, width, x0, y0, oh, ow;
    if (!PyArg_ParseTuple(args, "y*w*pillllll|p", &data, &out, &gray, &denom, &height, &width,
                          &x0, &y0, &oh, &ow, &seek_ok))
        return NULL;
    PyObject *result = NULL;
    /* RGBX (4 bytes a pixel, the 4th 255) where out has room for 4 channels: the same RGB */
    int channels = gray ? 1 : out.len == (Py_ssize_t)oh * ow * 4 ? 4 : 3;
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
                      .pointers = NULL,
                      .seek = NULL,
                      .seek_ok = seek_ok};
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
    free(job.seek);
    Py_END_ALLOW_THREADS
    if (failed == 2)
        PyErr_SetString(PyExc_NotImplementedError, fail);
    else if (failed)
        PyErr_SetString(PyExc_ValueError, fail != NULL ? fail : err.message);
    else
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return result;
}

/* Lossless rewrite (libjpeg-turbo's transcoding, as jpegtran -restart 1 -optimize): the same
 * DCT coefficients, so the same pixels, as one sequential scan with a restart marker at every
 * iMCU row, for decode_region to seek to.  Other marker segments (EXIF, ICC) are dropped. */
static int rewrite(struct jpeg_decompress_struct *in, struct jpeg_compress_struct *out,
                   const unsigned char *data, unsigned long size, unsigned char **result,
                   unsigned long *result_size)
{
    jpeg_mem_src(in, data, size);
    jpeg_read_header(in, TRUE);
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(in);
    jpeg_copy_critical_parameters(in, out);
    out->restart_in_rows = 1;
    out->optimize_coding = TRUE;
    jpeg_mem_dest(out, result, result_size);
    jpeg_write_coefficients(out, coefs);
    jpeg_finish_compress(out);
    jpeg_finish_decompress(in);
    return 0;
}

static PyObject *add_restarts(PyObject *self, PyObject *args)
{
    (void)self;
    if (!libjpeg_ready())
        return NULL;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    struct jpeg_decompress_struct in;
    struct jpeg_compress_struct out;
    struct error_mgr err; /* one for both objects: either one's error jumps here */
    unsigned char *result = NULL;
    unsigned long result_size = 0;
    volatile int failed = 0, out_made = 0;
    err.message[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    in.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.pub.output_message = no_output;
    out.err = &err.pub;
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&in);
        jpeg_create_compress(&out);
        out_made = 1;
        rewrite(&in, &out, (const unsigned char *)data.buf, (unsigned long)data.len, &result,
                &result_size);
    }
    if (out_made)
        jpeg_destroy_compress(&out);
    jpeg_destroy_decompress(&in);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (failed) {
        free(result);
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)result, (Py_ssize_t)result_size);
    free(result);
    return bytes;
}

static PyMethodDef methods[] = {
    {"add_restarts", add_restarts, METH_VARARGS,
     "add_restarts(data) -> bytes\n"
     "The same JPEG (same coefficients) as one sequential scan with a restart marker at every\n"
     "iMCU row. ValueError on corrupt data."},
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, out, gray, denom, height, width, x0, y0, out_h, out_w, seek=True)\n"
     "Decode the box [y0, y0+out_h) x [x0, x0+out_w) of the JPEG `data` at scale 1/denom\n"
     "into `out`; the header must say height x width. ValueError on corrupt data."},
    LIBJPEG_METHODS{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegcrop",
                                    "Partial JPEG decode (libjpeg-turbo).", -1, methods};

PyMODINIT_FUNC PyInit__jpegcrop(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef JCS_EXTENSIONS
    int rgbx = 1; /* decode_region writes RGBX into 4-channel buffers */
#else
    int rgbx = 0;
#endif
    /* DLOPEN: the library is bound at import (bind); HEADERS: "system" or "vendored" */
    if (m != NULL && (PyModule_AddIntConstant(m, "DLOPEN", LIBJPEG_DLOPEN) < 0 ||
                      PyModule_AddStringConstant(m, "HEADERS", LIBJPEG_HEADERS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    if (m != NULL && PyModule_AddIntConstant(m, "RGBX", rgbx) < 0) {
        Py_DECREF(m);
        return NULL;
    }
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
