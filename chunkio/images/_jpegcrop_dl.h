/* How _jpegcrop reaches libjpeg-turbo.
 *
 * By default (setup.py, where the system's libjpeg-turbo headers and library are found) the
 * module links against the system's libjpeg and this file only says so.
 *
 * Built with CHUNKIO_JPEG_DLOPEN (setup.py: no system headers, or CHUNKIO_JPEG=vendored), the
 * module is compiled against the jpeg62 headers vendored under _vendor/libjpeg-turbo and
 * links no libjpeg at all: bind(path) dlopens a libjpeg-turbo with the jpeg62 ABI at import
 * time (chunkio.images.libjpeg finds one: Pillow's wheels carry it) and looks up every
 * function the module calls into a table of pointers; the macros below send the calls
 * through it, so the decoding code is the same in both builds.  Linking against Pillow's copy
 * at build time instead would tie the build to its file name, which carries a hash that
 * changes with every Pillow release: the import would then fail after a Pillow upgrade.
 *
 * Until bind() succeeds every call raises RuntimeError: a missing or unfit library is an
 * error, never a crash.  bind() refuses a library that lacks a function (libjpeg before
 * libjpeg-turbo 1.5 has no jpeg_crop_scanline) or whose jpeg_CreateDecompress refuses this
 * build's JPEG_LIB_VERSION or structure sizes (another ABI: libjpeg.so.8, say).
 */
#ifndef CHUNKIO_JPEGCROP_DL_H
#define CHUNKIO_JPEGCROP_DL_H

#ifdef CHUNKIO_JPEG_DLOPEN

#ifndef CHUNKIO_VENDORED_JPEG_HEADERS
#error "CHUNKIO_JPEG_DLOPEN builds use the headers under _vendor/libjpeg-turbo"
#endif

#include <dlfcn.h>

#define LIBJPEG_FUNCTIONS(X)                                                                  \
    X(jpeg_std_error)                                                                         \
    X(jpeg_CreateDecompress)                                                                  \
    X(jpeg_CreateCompress)                                                                    \
    X(jpeg_destroy_decompress)                                                                \
    X(jpeg_destroy_compress)                                                                  \
    X(jpeg_mem_src)                                                                           \
    X(jpeg_mem_dest)                                                                          \
    X(jpeg_read_header)                                                                       \
    X(jpeg_start_decompress)                                                                  \
    X(jpeg_crop_scanline)                                                                     \
    X(jpeg_skip_scanlines)                                                                    \
    X(jpeg_read_scanlines)                                                                    \
    X(jpeg_finish_decompress)                                                                 \
    X(jpeg_abort_decompress)                                                                  \
    X(jpeg_read_coefficients)                                                                 \
    X(jpeg_copy_critical_parameters)                                                          \
    X(jpeg_write_coefficients)                                                                \
    X(jpeg_finish_compress)

/* one pointer per function, typed by the header's own declaration */
#define LIBJPEG_POINTER(name) static __typeof__(name) *p_##name;
LIBJPEG_FUNCTIONS(LIBJPEG_POINTER)

/* from here on, every call (and jpeg_create_decompress's expansion) goes through the table */
#define jpeg_std_error (*p_jpeg_std_error)
#define jpeg_CreateDecompress (*p_jpeg_CreateDecompress)
#define jpeg_CreateCompress (*p_jpeg_CreateCompress)
#define jpeg_destroy_decompress (*p_jpeg_destroy_decompress)
#define jpeg_destroy_compress (*p_jpeg_destroy_compress)
#define jpeg_mem_src (*p_jpeg_mem_src)
#define jpeg_mem_dest (*p_jpeg_mem_dest)
#define jpeg_read_header (*p_jpeg_read_header)
#define jpeg_start_decompress (*p_jpeg_start_decompress)
#define jpeg_crop_scanline (*p_jpeg_crop_scanline)
#define jpeg_skip_scanlines (*p_jpeg_skip_scanlines)
#define jpeg_read_scanlines (*p_jpeg_read_scanlines)
#define jpeg_finish_decompress (*p_jpeg_finish_decompress)
#define jpeg_abort_decompress (*p_jpeg_abort_decompress)
#define jpeg_read_coefficients (*p_jpeg_read_coefficients)
#define jpeg_copy_critical_parameters (*p_jpeg_copy_critical_parameters)
#define jpeg_write_coefficients (*p_jpeg_write_coefficients)
#define jpeg_finish_compress (*p_jpeg_finish_compress)

static void *libjpeg_handle; /* set once bind() has checked everything; never closed */

static int libjpeg_ready(void)
{
    if (libjpeg_handle == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "chunkio.images._jpegcrop has no libjpeg-turbo bound (its build resolves "
                        "the library at import time: see chunkio.images.libjpeg)");
        return 0;
    }
    return 1;
}

struct abi_check {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

static void abi_error(j_common_ptr cinfo)
{
    struct abi_check *err = (struct abi_check *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

/* Whether the bound functions accept this build's structures: jpeg_Create* compare the
 * library's JPEG_LIB_VERSION and structure sizes with the caller's and fail through
 * error_exit when they differ.  NULL, or the library's message. */
static const char *abi_refusal(struct abi_check *err)
{
    struct jpeg_decompress_struct in;
    struct jpeg_compress_struct out;
    volatile int made_in = 0, made_out = 0;
    volatile int failed = 0;
    err->message[0] = '\0';
    in.err = jpeg_std_error(&err->pub);
    out.err = &err->pub;
    err->pub.error_exit = abi_error;
    if (setjmp(err->jump)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&in);
        made_in = 1;
        jpeg_create_compress(&out);
        made_out = 1;
    }
    if (made_out)
        jpeg_destroy_compress(&out);
    if (made_in)
        jpeg_destroy_decompress(&in);
    return failed ? err->message : NULL;
}

static PyObject *bind(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path;
    struct abi_check err;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    if (libjpeg_handle != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "libjpeg-turbo is already bound");
        return NULL;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, why ? why : "dlopen failed");
        return NULL;
    }
#define LIBJPEG_LOOKUP(name)                                                                  \
    p_##name = (__typeof__(p_##name))dlsym(handle, #name);                                    \
    if (p_##name == NULL) {                                                                   \
        PyErr_Format(PyExc_OSError,                                                           \
                     "%s has no %s: expected libjpeg-turbo 1.5 or newer with the jpeg62 API", \
                     path, #name);                                                            \
        goto refused;                                                                         \
    }
    LIBJPEG_FUNCTIONS(LIBJPEG_LOOKUP)
#undef LIBJPEG_LOOKUP
    const char *refusal = abi_refusal(&err);
    if (refusal != NULL) {
        PyErr_Format(PyExc_OSError, "%s does not take this build's jpeg62 structures: %s", path,
                     refusal);
        goto refused;
    }
    libjpeg_handle = handle;
    Py_RETURN_NONE;
refused:
#define LIBJPEG_CLEAR(name) p_##name = NULL;
    LIBJPEG_FUNCTIONS(LIBJPEG_CLEAR)
#undef LIBJPEG_CLEAR
    dlclose(handle);
    return NULL;
}

#define LIBJPEG_METHODS                                                                       \
    {"bind", bind, METH_VARARGS,                                                              \
     "bind(path)\n"                                                                           \
     "Load the libjpeg-turbo (jpeg62 ABI) at `path` and use it from now on; once per "        \
     "process. OSError when it cannot be loaded or lacks what this module needs."},
#define LIBJPEG_DLOPEN 1

#else /* linked against the system's libjpeg at build time */

static int libjpeg_ready(void) { return 1; }

#define LIBJPEG_METHODS
#define LIBJPEG_DLOPEN 0

#endif /* CHUNKIO_JPEG_DLOPEN */

#ifdef CHUNKIO_VENDORED_JPEG_HEADERS
#define LIBJPEG_HEADERS "vendored"
#else
#define LIBJPEG_HEADERS "system"
#endif

#endif /* CHUNKIO_JPEGCROP_DL_H */
