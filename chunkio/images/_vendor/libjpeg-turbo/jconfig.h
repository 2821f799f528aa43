/* jconfig.h for chunkio's vendored libjpeg-turbo headers (jpeg62 API).
 *
 * libjpeg-turbo's build generates this file; this copy is chunkio's, written for the
 * libraries chunkio.images._jpegcrop is resolved against at import time (Pillow's bundled
 * libjpeg-turbo, or a system libjpeg.so.62): libjpeg-turbo 2.x and 3.x built with the jpeg62
 * API, 8-bit samples and the in-memory source and destination managers, which are libjpeg-
 * turbo's defaults.  Nothing here changes the layout of libjpeg's structures beyond
 * JPEG_LIB_VERSION, and jpeg_CreateDecompress refuses a library whose version or structure
 * size differs (bind() in _jpegcrop_dl.h checks it before anything is decoded).
 */

#define JPEG_LIB_VERSION  62

/* the headers' version (Debian's libjpeg62-turbo-dev 1:2.1.5-2); the library may be newer */
#define LIBJPEG_TURBO_VERSION  2.1.5
#define LIBJPEG_TURBO_VERSION_NUMBER  2001005

#define C_ARITH_CODING_SUPPORTED 1
#define D_ARITH_CODING_SUPPORTED 1
#define MEM_SRCDST_SUPPORTED 1
#define WITH_SIMD 1

#define BITS_IN_JSAMPLE  8      /* use 8 or 12 */

/* RIGHT_SHIFT_IS_UNSIGNED: not defined (no supported compiler needs it) */

/* which headers a build used: _jpegcrop reports it (HEADERS), the build test checks it */
#define CHUNKIO_VENDORED_JPEG_HEADERS 1
