/* One pass over a tensor's memory for the statistics hookviz keeps of it.

   hookviz reduces gradients (and, in a detailed run, forward values) to their 2-norm, sum, min,
   max, zero count and NaN / Inf counts: every step of a watch, every Node of a run. Stock PyTorch
   CPU kernels take a pass per statistic (vector_norm, sum, aminmax, count_nonzero; the last one
   compute-bound), or a copy into a workspace first for small tensors. This loop reads each element
   once, in 16 independent lanes so that the compiler vectorises it (a single running sum cannot be
   reordered without -ffast-math).

   Sums are taken in float32 lanes over blocks of 4096 elements and the blocks added in double
   precision, so they do not drift on large tensors: torch.linalg.vector_norm's float32
   accumulation on CPU is off by 1e-5 relative at 2^20 elements and 1.4e-3 at 25 million; this
   is off by about 1e-9. A float32 square past ~3.4e38 (|x| > ~1.8e19) still overflows: a sum of
   squares that is Inf while no element is gives the caller its cue. NaN never wins a comparison,
   so min and max are those of the other elements; the caller decides what a NaN makes of them.
   The statistics do not depend on element order, so any dense layout is read as one flat buffer.

   Plain C, no PyTorch headers: it takes a data pointer and an element count, so one build serves
   every torch version. The GIL is released while it reads.

   summary_f32(address, count) / summary_f64(address, count)
       -> (sum of squares, sum, min, max, zeros, NaNs, Infs); min and max are +Inf / -Inf
          when count is 0 or every element is NaN.

   strided_f32(address, sizes, strides) / strided_f64(...)
       -> the same tuple for a strided view whose last dimension is contiguous (element strides,
          all >= 0, the last 1: GPT-2's logits[:, :-1], a head split by .view and .transpose),
          read run by run. A stride-0 dimension (an expanded tensor) reads its run again, as each
          of its elements counts.

   The overview a detailed run keeps of a large 2-D tensor (its inspector heatmap) is the root mean
   square of each of at most 32 x 32 blocks. PyTorch takes it as adaptive_avg_pool2d of a squared
   copy: on GPT-2's [512, 50257] logits 62 ms, a copy of 103 MB and two passes. This reads the
   matrix once (a row two blocks share, twice): per block of rows, each column's squares summed in
   double (a loop that vectorises across columns), then those sums added up per block of columns.

   overview_f32(source, rows, columns, target, out_rows, out_columns) / overview_f64(...)
       source: a row-major rows x columns matrix; target: out_rows x out_columns float32, row-major,
       written with the root mean square of each block. Blocks are cut as adaptive_avg_pool2d cuts
       them (ATen's AdaptivePooling.h): output row i covers rows [floor(i * rows / out_rows),
       ceil((i + 1) * rows / out_rows)), columns alike, so blocks overlap when out_rows does not
       divide rows. 1 <= out_rows <= rows, 1 <= out_columns <= columns. Returns None.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define LANES 16
#define BLOCK 4096 /* elements summed in float32 lanes before they go to the double total */

/* AVX2 where the CPU has it, chosen at load time (GCC / Clang function multi-versioning);
   the baseline build (SSE2 on x86-64, NEON on arm64) everywhere else. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__APPLE__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

typedef struct {
    double sum_of_squares, sum, min, max;
    int64_t zeros, nans, infs;
} Summary;

static PyObject *as_tuple(const Summary *s) {
    return Py_BuildValue("ddddLLL", s->sum_of_squares, s->sum, s->min, s->max, (long long)s->zeros,
                         (long long)s->nans, (long long)s->infs);
}

#define DEFINE_SUMMARY(NAME, TYPE, ABS)                                                           \
    VECTOR_CLONES static void NAME##_loop(const TYPE *p, int64_t n, Summary *out) {              \
        double squares = 0, total = 0, low = INFINITY, high = -INFINITY;                          \
        int64_t z = 0, q = 0, f = 0, i = 0;                                                       \
        while (i < n) {                                                                           \
            int64_t end = n - i > BLOCK ? i + BLOCK : n;                                          \
            TYPE sq[LANES] = {0}, sm[LANES] = {0}, lo[LANES], hi[LANES];                          \
            int32_t zero[LANES] = {0};                                                            \
            for (int l = 0; l < LANES; ++l) lo[l] = (TYPE)INFINITY, hi[l] = -(TYPE)INFINITY;      \
            for (; i + LANES <= end; i += LANES) {                                                \
                for (int l = 0; l < LANES; ++l) {                                                 \
                    TYPE v = p[i + l];                                                            \
                    sq[l] += v * v;                                                               \
                    sm[l] += v;                                                                   \
                    lo[l] = v < lo[l] ? v : lo[l];                                                \
                    hi[l] = v > hi[l] ? v : hi[l];                                                \
                    zero[l] += v == 0;                                                            \
                }                                                                                 \
            }                                                                                     \
            for (; i < end; ++i) {                                                                \
                TYPE v = p[i];                                                                    \
                sq[0] += v * v;                                                                   \
                sm[0] += v;                                                                       \
                lo[0] = v < lo[0] ? v : lo[0];                                                    \
                hi[0] = v > hi[0] ? v : hi[0];                                                    \
                zero[0] += v == 0;                                                                \
            }                                                                                     \
            for (int l = 0; l < LANES; ++l) {                                                     \
                squares += sq[l];                                                                 \
                total += sm[l];                                                                   \
                low = lo[l] < low ? lo[l] : low;                                                  \
                high = hi[l] > high ? hi[l] : high;                                               \
                z += zero[l];                                                                     \
            }                                                                                     \
        }                                                                                         \
        /* A NaN or Inf element makes the sum of squares NaN or Inf, so finite sums prove there  \
           is none; only otherwise are they counted, in a second pass. */                         \
        if (!isfinite(squares) || !isfinite(total)) {                                             \
            for (int64_t k = 0; k < n; ++k) {                                                     \
                q += p[k] != p[k];                                                                \
                f += ABS(p[k]) == (TYPE)INFINITY;                                                 \
            }                                                                                     \
        }                                                                                         \
        out->sum_of_squares = squares, out->sum = total, out->min = low, out->max = high;         \
        out->zeros = z, out->nans = q, out->infs = f;                                             \
    }                                                                                             \
                                                                                                  \
    static PyObject *NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {              \
        if (nargs != 2) {                                                                         \
            PyErr_SetString(PyExc_TypeError, #NAME "(address, count) takes 2 arguments");         \
            return NULL;                                                                          \
        }                                                                                         \
        uintptr_t address = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);                        \
        int64_t n = (int64_t)PyLong_AsLongLong(args[1]);                                          \
        if (PyErr_Occurred()) return NULL;                                                        \
        if (n < 0 || (n > 0 && address == 0)) {                                                   \
            PyErr_SetString(PyExc_ValueError, #NAME ": a null address or a negative count");      \
            return NULL;                                                                          \
        }                                                                                         \
        Summary s;                                                                                \
        Py_BEGIN_ALLOW_THREADS NAME##_loop((const TYPE *)address, n, &s);                         \
        Py_END_ALLOW_THREADS return as_tuple(&s);                                                 \
    }

DEFINE_SUMMARY(summary_f32, float, fabsf)
DEFINE_SUMMARY(summary_f64, double, fabs)

#define MAX_DIMS 25 /* PyTorch's limit on a tensor's dimensions */

/* sizes and element strides of a strided view from two Python sequences; 0 and an exception set
   when they are not sequences of equal length up to MAX_DIMS of integers, sizes >= 1 and strides
   >= 0 with the last stride 1 (each row of the last dimension is one contiguous run) */
static int read_layout(PyObject *sizes, PyObject *strides, int64_t *size, int64_t *stride,
                       int *dims) {
    PyObject *a = PySequence_Fast(sizes, "sizes must be a sequence");
    if (!a) return 0;
    PyObject *b = PySequence_Fast(strides, "strides must be a sequence");
    if (!b) return Py_DECREF(a), 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
    int ok = n >= 1 && n <= MAX_DIMS && n == PySequence_Fast_GET_SIZE(b);
    for (Py_ssize_t d = 0; ok && d < n; ++d) {
        size[d] = (int64_t)PyLong_AsLongLong(PySequence_Fast_GET_ITEM(a, d));
        stride[d] = (int64_t)PyLong_AsLongLong(PySequence_Fast_GET_ITEM(b, d));
        ok = !PyErr_Occurred() && size[d] >= 1 && stride[d] >= 0;
    }
    ok = ok && stride[n - 1] == 1;
    Py_DECREF(a), Py_DECREF(b);
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError,
                        "a layout of 1 to 25 sizes >= 1 and strides >= 0, the last 1");
    *dims = (int)n;
    return ok;
}

/* The summary of a strided view: its contiguous runs along the last dimension(s) read one by one
   with the loop above, their summaries merged (sums in double). Trailing dimensions laid out
   contiguously after one another are read as one run. */
#define DEFINE_STRIDED(NAME, TYPE, LOOP)                                                          \
    static void NAME##_loop(const TYPE *p, int64_t *size, const int64_t *stride, int dims,        \
                            Summary *out) {                                                       \
        int64_t run = size[dims - 1];                                                             \
        while (dims > 1 && stride[dims - 2] == run) run *= size[--dims - 1];                      \
        int64_t index[MAX_DIMS] = {0}, offset = 0;                                                \
        Summary all = {0, 0, INFINITY, -INFINITY, 0, 0, 0};                                       \
        for (;;) {                                                                                \
            Summary part;                                                                         \
            LOOP(p + offset, run, &part);                                                         \
            all.sum_of_squares += part.sum_of_squares, all.sum += part.sum;                       \
            all.min = part.min < all.min ? part.min : all.min;                                    \
            all.max = part.max > all.max ? part.max : all.max;                                    \
            all.zeros += part.zeros, all.nans += part.nans, all.infs += part.infs;                \
            int d = dims - 2; /* the next run: an odometer over the outer dimensions */           \
            while (d >= 0 && ++index[d] == size[d]) {                                            \
                offset -= (size[d] - 1) * stride[d];                                              \
                index[d--] = 0;                                                                   \
            }                                                                                     \
            if (d < 0) break;                                                                     \
            offset += stride[d];                                                                  \
        }                                                                                         \
        *out = all;                                                                               \
    }                                                                                             \
                                                                                                  \
    static PyObject *NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {              \
        if (nargs != 3) {                                                                         \
            PyErr_SetString(PyExc_TypeError, #NAME "(address, sizes, strides) takes 3 arguments"); \
            return NULL;                                                                          \
        }                                                                                         \
        uintptr_t address = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);                        \
        if (PyErr_Occurred()) return NULL;                                                        \
        int64_t size[MAX_DIMS], stride[MAX_DIMS];                                                 \
        int dims;                                                                                 \
        if (!read_layout(args[1], args[2], size, stride, &dims)) return NULL;                     \
        if (!address) {                                                                           \
            PyErr_SetString(PyExc_ValueError, #NAME ": a null address");                          \
            return NULL;                                                                          \
        }                                                                                         \
        Summary s;                                                                                \
        Py_BEGIN_ALLOW_THREADS NAME##_loop((const TYPE *)address, size, stride, dims, &s);        \
        Py_END_ALLOW_THREADS return as_tuple(&s);                                                 \
    }

DEFINE_STRIDED(strided_f32, float, summary_f32_loop)
DEFINE_STRIDED(strided_f64, double, summary_f64_loop)

/* adaptive_avg_pool2d's block bounds along one side: [START, END) of output cell i of n cells. */
#define START(i, size, n) ((i) * (size) / (n))
#define END(i, size, n) (((i) + 1) * (size) / (n) + (((i) + 1) * (size) % (n) != 0))

#define DEFINE_OVERVIEW(NAME, TYPE)                                                               \
    /* squares[c] += row[c]^2 for every column: independent across columns, so it vectorises */  \
    VECTOR_CLONES static void NAME##_add_squares(const TYPE *row, int64_t cols, double *squares) { \
        for (int64_t c = 0; c < cols; ++c) {                                                      \
            double v = (double)row[c];                                                            \
            squares[c] += v * v;                                                                  \
        }                                                                                         \
    }                                                                                             \
                                                                                                  \
    /* Per block of rows: each column's sum of squares over those rows (a row two blocks share   \
       is read for each), then those sums added up per block of columns. */                      \
    static void NAME##_loop(const TYPE *x, int64_t rows, int64_t cols, float *out, int64_t orows, \
                            int64_t ocols, double *squares) {                                     \
        for (int64_t i = 0; i < orows; ++i) {                                                     \
            int64_t first = START(i, rows, orows), last = END(i, rows, orows);                    \
            for (int64_t c = 0; c < cols; ++c) squares[c] = 0;                                    \
            for (int64_t r = first; r < last; ++r)                                                \
                NAME##_add_squares(x + r * cols, cols, squares);                                  \
            for (int64_t j = 0; j < ocols; ++j) {                                                 \
                int64_t from = START(j, cols, ocols), to = END(j, cols, ocols);                   \
                double total = 0;                                                                 \
                for (int64_t c = from; c < to; ++c) total += squares[c];                          \
                double cells = (double)(last - first) * (double)(to - from);                      \
                out[i * ocols + j] = (float)sqrt(total / cells);                                  \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
                                                                                                  \
    static PyObject *NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {              \
        if (nargs != 6) {                                                                         \
            PyErr_SetString(PyExc_TypeError, #NAME "(source, rows, columns, target, out_rows, "   \
                                             "out_columns) takes 6 arguments");                   \
            return NULL;                                                                          \
        }                                                                                         \
        uintptr_t source = (uintptr_t)PyLong_AsUnsignedLongLong(args[0]);                         \
        int64_t rows = (int64_t)PyLong_AsLongLong(args[1]);                                      \
        int64_t cols = (int64_t)PyLong_AsLongLong(args[2]);                                      \
        uintptr_t target = (uintptr_t)PyLong_AsUnsignedLongLong(args[3]);                         \
        int64_t orows = (int64_t)PyLong_AsLongLong(args[4]);                                     \
        int64_t ocols = (int64_t)PyLong_AsLongLong(args[5]);                                     \
        if (PyErr_Occurred()) return NULL;                                                        \
        if (!source || !target || orows < 1 || ocols < 1 || orows > rows || ocols > cols) {       \
            PyErr_SetString(PyExc_ValueError, #NAME ": a null address, or not 1 <= out_rows <= "  \
                                              "rows and 1 <= out_columns <= columns");            \
            return NULL;                                                                          \
        }                                                                                         \
        double *squares = PyMem_RawMalloc(cols * sizeof(double));                                 \
        if (!squares) return PyErr_NoMemory();                                                    \
        Py_BEGIN_ALLOW_THREADS NAME##_loop((const TYPE *)source, rows, cols, (float *)target,     \
                                           orows, ocols, squares);                                \
        Py_END_ALLOW_THREADS PyMem_RawFree(squares);                                              \
        Py_RETURN_NONE;                                                                           \
    }

DEFINE_OVERVIEW(overview_f32, float)
DEFINE_OVERVIEW(overview_f64, double)

static PyMethodDef methods[] = {
    {"summary_f32", (PyCFunction)(void (*)(void))summary_f32, METH_FASTCALL,
     "summary_f32(address, count): (sum of squares, sum, min, max, zeros, NaNs, Infs) of count "
     "float32 at address"},
    {"summary_f64", (PyCFunction)(void (*)(void))summary_f64, METH_FASTCALL,
     "summary_f64(address, count): (sum of squares, sum, min, max, zeros, NaNs, Infs) of count "
     "float64 at address"},
    {"strided_f32", (PyCFunction)(void (*)(void))strided_f32, METH_FASTCALL,
     "strided_f32(address, sizes, strides): summary_f32 of a strided float32 view (element strides "
     ">= 0, the last 1)"},
    {"strided_f64", (PyCFunction)(void (*)(void))strided_f64, METH_FASTCALL,
     "strided_f64(address, sizes, strides): summary_f64 of a strided float64 view (element strides "
     ">= 0, the last 1)"},
    {"overview_f32", (PyCFunction)(void (*)(void))overview_f32, METH_FASTCALL,
     "overview_f32(source, rows, columns, target, out_rows, out_columns): block root mean squares "
     "of a row-major float32 matrix into out_rows x out_columns float32 at target"},
    {"overview_f64", (PyCFunction)(void (*)(void))overview_f64, METH_FASTCALL,
     "overview_f64(source, rows, columns, target, out_rows, out_columns): as overview_f32, of a "
     "float64 matrix (the target is float32)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }
