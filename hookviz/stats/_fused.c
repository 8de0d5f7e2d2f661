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

   Sink(task_id, begin, fallback): the watch's gradient hooks, which read each gradient with the
   loop above without running Python (see the section "the watch's gradient hooks" below).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
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

/* ------------------------------------------------------------------ the watch's gradient hooks

   A watched step runs one hook per parameter and per module output (hookviz/gradient_watch.py):
   on a 20-layer MLP 80 per step. Written in Python, each took about 4 us beside its compiled read,
   a fifth of what the watch adds to a step; these do the same in C and call back into Python only
   at the first hook of a backward and for a gradient they do not read themselves.

   Sink(task_id, begin, fallback) holds one watch's state for the backward running now:
       task_id() -> the id of the running backward (torch._C._current_graph_task_id);
       begin(task), called by the first hook of each backward: the watch resets, queues its
           end-of-backward callback and sets the members below (task, recording, arrived, done);
       fallback(column, grad) takes a gradient these do not read: not a dense float32 / float64
           CPU tensor, empty, or one whose float32 squares overflowed (hookviz.watch_reduce).
   Members: open (0 makes every hook return at once), task (the backward the members are of; -2
   none), recording, arrived (list: each hook's column, in the order the hooks ran), done (list:
   per gradient read, (columns, numel, norm, max_abs, nonzero, nonfinite), as watch_reduce keeps
   them; a column listed twice counts it twice). reset_last() forgets the last gradient read:
   hooks on one tensor fire one after the other, so a gradient several hooks see is read once and
   each hook's column is added to its entry (a module and its last child see one tensor; the two
   calls of a module whose outputs are summed get one gradient object, and count it twice).

   Hooks, each returning None (the gradient unchanged):
       sink.parameter_hook(column)          for register_post_accumulate_grad_hook: hook(parameter)
       sink.output_hook(column, output_nr)  for Node.register_prehook: hook(grad_outputs)
       sink.tensor_hook(column)             for Tensor.register_hook: hook(grad)
*/

typedef struct {
    PyObject_HEAD
    PyObject *task_id, *begin, *fallback, *arrived, *done, *last, *last_columns;
    long long task;
    int open, recording;
} Sink;

enum { PARAMETER_HOOK, OUTPUT_HOOK, TENSOR_HOOK };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Sink *sink;
    PyObject *column;
    Py_ssize_t output_nr;
    int kind;
} Hook;

/* interned names and the torch objects a dense float CPU gradient is recognised by */
static PyObject *s_grad, *s_dtype, *s_is_cpu, *s_layout, *s_is_neg, *s_is_contiguous, *s_numel,
    *s_data_ptr, *t_float32, *t_float64, *t_strided;

static int sink_traverse(Sink *s, visitproc visit, void *arg) {
    Py_VISIT(s->task_id);
    Py_VISIT(s->begin);
    Py_VISIT(s->fallback);
    Py_VISIT(s->arrived);
    Py_VISIT(s->done);
    Py_VISIT(s->last);
    Py_VISIT(s->last_columns);
    return 0;
}

static int sink_clear(Sink *s) {
    Py_CLEAR(s->task_id);
    Py_CLEAR(s->begin);
    Py_CLEAR(s->fallback);
    Py_CLEAR(s->arrived);
    Py_CLEAR(s->done);
    Py_CLEAR(s->last);
    Py_CLEAR(s->last_columns);
    return 0;
}

static void sink_dealloc(Sink *s) {
    PyObject_GC_UnTrack(s);
    sink_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int sink_init(Sink *s, PyObject *args, PyObject *kwargs) {
    PyObject *task_id, *begin, *fallback;
    if (!PyArg_ParseTuple(args, "OOO:Sink", &task_id, &begin, &fallback)) return -1;
    Py_XSETREF(s->task_id, Py_NewRef(task_id));
    Py_XSETREF(s->begin, Py_NewRef(begin));
    Py_XSETREF(s->fallback, Py_NewRef(fallback));
    Py_XSETREF(s->arrived, PyList_New(0));
    Py_XSETREF(s->done, PyList_New(0));
    Py_CLEAR(s->last);
    Py_CLEAR(s->last_columns);
    s->task = -2, s->open = 1, s->recording = 0;
    return s->arrived && s->done ? 0 : -1;
}

static PyObject *sink_reset_last(Sink *s, PyObject *unused) {
    Py_CLEAR(s->last);
    Py_CLEAR(s->last_columns);
    Py_RETURN_NONE;
}

static PyObject *make_hook(Sink *s, PyObject *column, Py_ssize_t output_nr, int kind);

static PyObject *sink_parameter_hook(Sink *s, PyObject *column) {
    return make_hook(s, column, 0, PARAMETER_HOOK);
}

static PyObject *sink_tensor_hook(Sink *s, PyObject *column) {
    return make_hook(s, column, 0, TENSOR_HOOK);
}

static PyObject *sink_output_hook(Sink *s, PyObject *args) {
    PyObject *column;
    Py_ssize_t output_nr;
    if (!PyArg_ParseTuple(args, "On:output_hook", &column, &output_nr)) return NULL;
    return make_hook(s, column, output_nr, OUTPUT_HOOK);
}

/* 1: an attribute is the object expected; 0: it is not; -1: an error is set */
static int attribute_is(PyObject *o, PyObject *name, PyObject *expected) {
    PyObject *value = PyObject_GetAttr(o, name);
    if (!value) return -1;
    int same = value == expected;
    Py_DECREF(value);
    return same;
}

static int method_is_true(PyObject *o, PyObject *name) {
    PyObject *value = PyObject_CallMethodNoArgs(o, name);
    if (!value) return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static long long method_as_long(PyObject *o, PyObject *name) {
    PyObject *value = PyObject_CallMethodNoArgs(o, name);
    if (!value) return -1;
    long long n = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return n;
}

/* Read one gradient into sink->done; 0 when it is not one read here (the caller falls back). */
static int take(Sink *s, PyObject *column, PyObject *grad) {
    if (s->last == grad) /* another hook on the tensor read last: its column counts it too */
        return PyList_Append(s->last_columns, column) ? -1 : 1;
    PyObject *dtype = PyObject_GetAttr(grad, s_dtype);
    if (!dtype) return -1;
    int f32 = dtype == t_float32, f64 = dtype == t_float64;
    Py_DECREF(dtype);
    if (!f32 && !f64) return 0;
    int ok = attribute_is(grad, s_is_cpu, Py_True);
    if (ok == 1) ok = attribute_is(grad, s_layout, t_strided);
    if (ok == 1) { /* a negative view holds its values unnegated */
        ok = method_is_true(grad, s_is_neg);
        ok = ok < 0 ? -1 : !ok;
    }
    if (ok == 1) ok = method_is_true(grad, s_is_contiguous);
    if (ok != 1) return ok;
    long long n = method_as_long(grad, s_numel);
    if (n <= 0) return n < 0 && PyErr_Occurred() ? -1 : 0;
    PyObject *pointer = PyObject_CallMethodNoArgs(grad, s_data_ptr);
    if (!pointer) return -1;
    uintptr_t address = (uintptr_t)PyLong_AsUnsignedLongLong(pointer);
    Py_DECREF(pointer);
    if (PyErr_Occurred()) return -1;
    if (!address) return 0;
    Summary m;
    Py_BEGIN_ALLOW_THREADS
    if (f32) summary_f32_loop((const float *)address, n, &m);
    else summary_f64_loop((const double *)address, n, &m);
    Py_END_ALLOW_THREADS
    double norm = sqrt(m.sum_of_squares);
    if (isinf(norm) && !m.nans && !m.infs) return 0; /* float32 squares overflowed: taken again */
    double max_abs = m.nans ? NAN : (-m.min > m.max ? -m.min : m.max); /* NaN propagates, as amax */
    PyObject *columns = PyList_New(1);
    if (!columns) return -1;
    PyList_SET_ITEM(columns, 0, Py_NewRef(column));
    PyObject *entry = Py_BuildValue("(OLddLL)", columns, n, norm, max_abs, n - (long long)m.zeros,
                                    (long long)(m.nans + m.infs));
    if (!entry || PyList_Append(s->done, entry)) return Py_XDECREF(entry), Py_DECREF(columns), -1;
    Py_DECREF(entry);
    PyObject *old = s->last, *old_columns = s->last_columns; /* both set before either is freed */
    s->last = Py_NewRef(grad), s->last_columns = columns;
    Py_XDECREF(old);
    Py_XDECREF(old_columns);
    return 1;
}

static PyObject *hook_call(Hook *h, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Sink *s = h->sink;
    if (!s) Py_RETURN_NONE; /* cleared by the garbage collector */
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) {
        PyErr_SetString(PyExc_TypeError, "a watch hook takes one argument");
        return NULL;
    }
    if (!s->open) Py_RETURN_NONE;
    if (!s->task_id || !s->arrived || !s->done || !PyList_Check(s->arrived) || !PyList_Check(s->done)) {
        PyErr_SetString(PyExc_RuntimeError, "a watch hook's Sink is not set up: Sink(task_id, begin, "
                                            "fallback), with lists as arrived and done");
        return NULL;
    }
    PyObject *grad; /* borrowed, or owned for a parameter's .grad */
    if (h->kind == OUTPUT_HOOK) {
        if (!PyTuple_Check(args[0]) || h->output_nr >= PyTuple_GET_SIZE(args[0])) {
            PyErr_SetString(PyExc_TypeError, "a watch output hook takes the Node's grad_outputs");
            return NULL;
        }
        grad = PyTuple_GET_ITEM(args[0], h->output_nr);
        if (grad == Py_None) Py_RETURN_NONE;
        Py_INCREF(grad);
    } else if (h->kind == TENSOR_HOOK) {
        if (args[0] == Py_None) Py_RETURN_NONE;
        grad = Py_NewRef(args[0]);
    } else if (!(grad = PyObject_GetAttr(args[0], s_grad))) {
        return NULL;
    }
    PyObject *task = PyObject_CallNoArgs(s->task_id);
    long long id = task ? PyLong_AsLongLong(task) : -1;
    Py_XDECREF(task);
    if (PyErr_Occurred()) return Py_DECREF(grad), NULL;
    if (id != s->task) { /* the first hook of a backward: begin() sets the members */
        PyObject *answer = (task = PyLong_FromLongLong(id)) ? PyObject_CallOneArg(s->begin, task) : NULL;
        Py_XDECREF(task);
        if (!answer) return Py_DECREF(grad), NULL;
        Py_DECREF(answer);
    }
    if (!s->open || !s->recording || s->task != id) return Py_DECREF(grad), Py_NewRef(Py_None);
    if (PyList_Append(s->arrived, h->column)) return Py_DECREF(grad), NULL;
    int found = grad == Py_None ? 1 : take(s, h->column, grad);
    if (found == 0) {
        PyObject *done = PyObject_CallFunctionObjArgs(s->fallback, h->column, grad, NULL);
        found = done ? 1 : -1;
        Py_XDECREF(done);
    }
    Py_DECREF(grad);
    if (found < 0) return NULL;
    Py_RETURN_NONE;
}

static int hook_traverse(Hook *h, visitproc visit, void *arg) {
    Py_VISIT(h->sink);
    Py_VISIT(h->column);
    return 0;
}

static int hook_clear(Hook *h) {
    Py_CLEAR(h->sink);
    Py_CLEAR(h->column);
    return 0;
}

static void hook_dealloc(Hook *h) {
    PyObject_GC_UnTrack(h);
    hook_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyMemberDef sink_members[] = {
    {"task", T_LONGLONG, offsetof(Sink, task), 0, "the backward the members are of (-2: none)"},
    {"open", T_INT, offsetof(Sink, open), 0, "0 makes every hook return at once"},
    {"recording", T_INT, offsetof(Sink, recording), 0, "whether this backward is recorded"},
    {NULL},
};

/* arrived and done are lists, always: a hook appends to them without looking */
static PyObject *get_list(Sink *s, void *offset) {
    PyObject *list = *(PyObject **)((char *)s + (size_t)offset);
    if (!list) PyErr_SetString(PyExc_AttributeError, "a Sink's lists are set by Sink(...)");
    return list ? Py_NewRef(list) : NULL;
}

static int set_list(Sink *s, PyObject *value, void *offset) {
    if (!value || !PyList_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "a Sink's arrived and done are lists (they cannot be deleted)");
        return -1;
    }
    Py_XSETREF(*(PyObject **)((char *)s + (size_t)offset), Py_NewRef(value));
    return 0;
}

static PyGetSetDef sink_getsets[] = {
    {"arrived", (getter)get_list, (setter)set_list, "the hooks' columns in the order they ran",
     (void *)offsetof(Sink, arrived)},
    {"done", (getter)get_list, (setter)set_list,
     "(columns, numel, norm, max_abs, nonzero, nonfinite) per gradient read",
     (void *)offsetof(Sink, done)},
    {NULL},
};

static PyMethodDef sink_methods[] = {
    {"reset_last", (PyCFunction)sink_reset_last, METH_NOARGS, "forget the last gradient read"},
    {"parameter_hook", (PyCFunction)sink_parameter_hook, METH_O,
     "parameter_hook(column): a hook for register_post_accumulate_grad_hook"},
    {"output_hook", (PyCFunction)sink_output_hook, METH_VARARGS,
     "output_hook(column, output_nr): a hook for Node.register_prehook"},
    {"tensor_hook", (PyCFunction)sink_tensor_hook, METH_O,
     "tensor_hook(column): a hook for Tensor.register_hook"},
    {NULL},
};

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hookviz._fused.Sink",
    .tp_basicsize = sizeof(Sink),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Sink(task_id, begin, fallback): one watch's gradient hooks and what they read "
              "(see hookviz/_fused.c)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sink_init,
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_traverse = (traverseproc)sink_traverse,
    .tp_clear = (inquiry)sink_clear,
    .tp_members = sink_members,
    .tp_getset = sink_getsets,
    .tp_methods = sink_methods,
};

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hookviz._fused.Hook",
    .tp_basicsize = sizeof(Hook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "one gradient hook of a Sink",
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Hook, vectorcall),
    .tp_dealloc = (destructor)hook_dealloc,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
};

static PyObject *make_hook(Sink *s, PyObject *column, Py_ssize_t output_nr, int kind) {
    if (!PyLong_Check(column) || output_nr < 0) {
        PyErr_SetString(PyExc_TypeError, "a hook's column and output_nr are ints >= 0");
        return NULL;
    }
    Hook *h = PyObject_GC_New(Hook, &HookType);
    if (!h) return NULL;
    h->vectorcall = (vectorcallfunc)hook_call;
    h->sink = (Sink *)Py_NewRef(s);
    h->column = Py_NewRef(column);
    h->output_nr = output_nr, h->kind = kind;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

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

static int intern(PyObject **target, const char *name) {
    return (*target = PyUnicode_InternFromString(name)) != NULL;
}

PyMODINIT_FUNC PyInit__fused(void) {
    if (PyType_Ready(&SinkType) < 0 || PyType_Ready(&HookType) < 0) return NULL;
    if (!intern(&s_grad, "grad") || !intern(&s_dtype, "dtype") || !intern(&s_is_cpu, "is_cpu") ||
        !intern(&s_layout, "layout") || !intern(&s_is_neg, "is_neg") ||
        !intern(&s_is_contiguous, "is_contiguous") || !intern(&s_numel, "numel") ||
        !intern(&s_data_ptr, "data_ptr"))
        return NULL;
    /* torch is imported already: hookviz imports it before this module */
    PyObject *torch = PyImport_ImportModule("torch");
    if (!torch) return NULL;
    t_float32 = PyObject_GetAttrString(torch, "float32");
    t_float64 = PyObject_GetAttrString(torch, "float64");
    t_strided = PyObject_GetAttrString(torch, "strided");
    Py_DECREF(torch);
    if (!t_float32 || !t_float64 || !t_strided) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Sink", (PyObject *)&SinkType) < 0) return Py_DECREF(m), NULL;
    return m;
}
