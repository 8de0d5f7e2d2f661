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
        Py_END_ALLOW_THREADS return Py_BuildValue("ddddLLL", s.sum_of_squares, s.sum, s.min,     \
                                                  s.max, (long long)s.zeros, (long long)s.nans,   \
                                                  (long long)s.infs);                             \
    }

DEFINE_SUMMARY(summary_f32, float, fabsf)
DEFINE_SUMMARY(summary_f64, double, fabs)

static PyMethodDef methods[] = {
    {"summary_f32", (PyCFunction)(void (*)(void))summary_f32, METH_FASTCALL,
     "summary_f32(address, count): (sum of squares, sum, min, max, zeros, NaNs, Infs) of count "
     "float32 at address"},
    {"summary_f64", (PyCFunction)(void (*)(void))summary_f64, METH_FASTCALL,
     "summary_f64(address, count): (sum of squares, sum, min, max, zeros, NaNs, Infs) of count "
     "float64 at address"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fused", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fused(void) { return PyModule_Create(&module); }
