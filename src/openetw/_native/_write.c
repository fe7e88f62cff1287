/* openetw._native._write: the compiled twin of the producer's write path.
 *
 *   PoolWriter(mapping, buffer_size, buffer_count, logger_id, full)
 *       .write(record, timestamp, cpu=0) -> bool      as ipc/pool.py's write (and write_big)
 *       .flush() -> bool                              as its flush
 *       .orphan()                                     as its orphan (a forked child's)
 *       .release()                                    lets the mapping go (the pool closes)
 *
 * The pure closures in ipc/pool.py (_write_path) are the reference: the same stores, in the same
 * order, so a pool holds the same bytes whichever engine wrote it (tests hold the two together).
 * A write runs wholly under the GIL, so threads need no token here; ``full(index)`` is called
 * after a write that made a buffer FULL, as the pure path calls its ``on_full``. The stores that
 * publish (a buffer's Offset, a state word) are release stores, so the service, which reads the
 * state word and then the buffer, never sees a word before the bytes it vouches for.
 *
 *   FastWrite(plan, python, route, activity, no_activity, pid, clock, unmapped)
 *       the twin of one event's generated ``write_fast`` (provider/encode_source.py): the same
 *       record, encoded straight into the pool when it writes to one compiled PoolWriter.
 *       Anything it does not handle itself (another value type, a value out of range, a string
 *       holding NUL, an activity, a record over 64 KB) it hands to ``python``, the generated
 *       function, with the same arguments: that one decides, so the results are its results.
 *
 *   TraceLoggingWrite(provider, method, live)
 *       ``TraceLoggingProvider.write`` for one provider: the call's keywords straight to its event's
 *       FastWrite, everything else to the method. ``live``: a one-item list the provider keeps
 *       holding its fast writes (a dict) while enabled, None while not.
 *
 *   ProviderWrite(provider, method, live)
 *       ``Provider.write`` for one provider: the call's values straight to its encoder's FastWrite,
 *       everything else to the method.
 *
 *   take_release_into(pool, index, buffer_size, logger_id, out)
 *       the service's take of a FULL buffer into its file's memory and its release, as
 *       ipc/pool.py's take_into and release one after the other.
 *
 *   screen(data, pid, providers, secured, classic, least, thread_ok, known)
 *       the service's check of one producer buffer, as service/screen.py's walk: the kept
 *       records as spans, the counts, the first problems (the Python formats their text).
 *
 * Every constant comes from _write_constants.h, generated from etl/layouts.py and ipc/pool.py
 * (python -m openetw._native.gen).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "_write_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._write writes little-endian data with native stores"
#endif

static inline void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline int64_t ld64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline void publish32(uint8_t *p, uint32_t v) { __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE); }
static inline uint32_t acquire32(const uint8_t *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE); }

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int mapped;
    uint8_t *map;
    Py_ssize_t size;
    Py_ssize_t buffer_size, count, max_record;
    uint16_t logger_id;
    /* the FILLING buffer, as absolute positions in the mapping; none: index -1, limit -1 */
    Py_ssize_t index, base, cursor, limit;
    uint16_t buffer_cpu, buffer_flags, pending_flags;
    int orphaned;
    PyObject *full; /* called with the index of a buffer that became FULL, or None */
} Writer;

static PyObject *closed_error(void) {
    PyErr_SetString(PyExc_ValueError, "the buffer pool is closed");
    return NULL;
}

static void flag_loss(Writer *w) {
    if (w->index >= 0) {
        w->buffer_flags |= OE_BUFFER_FLAG_EVENTS_LOST;
        st16(w->map + w->base + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
    } else {
        w->pending_flags |= OE_BUFFER_FLAG_EVENTS_LOST;
    }
}

static void add64(Writer *w, Py_ssize_t at) { st64(w->map + at, (uint64_t)ld64(w->map + at) + 1); }

/* The lowest FREE buffer, -1 when none is. Lowest first, not round robin: a pool's memory in
 * use follows what the producer needs (a steady writer cycles through the few first buffers,
 * and only a burst the service has not drained yet reaches further), so a large maximum costs
 * the pages of the bursts it absorbed, not the whole pool. */
static Py_ssize_t find_free(Writer *w) {
    const uint8_t *states = w->map + OE_POOL_STATE_OFFSET;
    for (Py_ssize_t candidate = 0; candidate < w->count; candidate++) {
        if (acquire32(states + 4 * candidate) == OE_STATE_FREE)
            return candidate;
    }
    return -1;
}

static void open_buffer(Writer *w, Py_ssize_t index, long cpu) {
    uint8_t *map = w->map;
    publish32(map + OE_POOL_STATE_OFFSET + 4 * index, OE_STATE_FILLING);
    w->index = index;
    w->base = OE_POOL_HEADER_SIZE + index * w->buffer_size;
    w->cursor = w->base + OE_BUFFER_HEADER_SIZE;
    w->limit = w->base + w->buffer_size;
    w->buffer_cpu = (uint16_t)(cpu & 0xFFFF);
    w->buffer_flags = OE_BUFFER_FLAG_PROCESSOR_INDEX | w->pending_flags;
    w->pending_flags = 0;
    st64(map + w->base + OE_BH_TIMESTAMP_AT, 0);
    publish32(map + w->base + OE_BH_OFFSET_AT, OE_BUFFER_HEADER_SIZE);
    st16(map + w->base + OE_BH_PROCESSORINDEX_AT, w->buffer_cpu);
    st16(map + w->base + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
}

/* FILLING -> FULL, the WMI_BUFFER_HEADER filled in first; returns the buffer's index. */
static Py_ssize_t complete(Writer *w) {
    uint8_t *map = w->map, *h = map + w->base;
    uint32_t used = (uint32_t)(w->cursor - w->base);
    int64_t sequence = ld64(map + OE_POOL_BUFFERSCOMPLETED_AT) + 1;
    st64(map + OE_POOL_BUFFERSCOMPLETED_AT, (uint64_t)sequence);
    int64_t timestamp = ld64(h + OE_BH_TIMESTAMP_AT);
    st32(h + OE_BH_BUFFERSIZE_AT, (uint32_t)w->buffer_size);
    st32(h + OE_BH_SAVEDOFFSET_AT, used);
    st32(h + OE_BH_CURRENTOFFSET_AT, used);
    st32(h + OE_BH_REFERENCECOUNT_AT, 0);
    st64(h + OE_BH_TIMESTAMP_AT, (uint64_t)timestamp);
    st64(h + OE_BH_SEQUENCENUMBER_AT, (uint64_t)sequence);
    st64(h + OE_BH_CLOCKTYPEFREQUENCY_AT, 0);
    st16(h + OE_BH_PROCESSORINDEX_AT, w->buffer_cpu);
    st16(h + OE_BH_LOGGERID_AT, w->logger_id);
    st32(h + OE_BH_STATE_AT, OE_BUFFER_STATE_WRITTEN);
    st32(h + OE_BH_OFFSET_AT, used);
    st16(h + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
    st16(h + OE_BH_BUFFERTYPE_AT, OE_BUFFER_TYPE_GENERIC);
    memset(h + OE_BH_KERNELPOINTERS_AT, 0, OE_BH_KERNELPOINTERS_SIZE);
    publish32(map + OE_POOL_STATE_OFFSET + 4 * w->index, OE_STATE_FULL);
    Py_ssize_t full = w->index;
    w->index = -1;
    w->cursor = 0;
    w->limit = -1;
    return full;
}

/* Where the record after one of ``size`` bytes at ``at`` starts: records are OE_RECORD_ALIGNMENT aligned. */
static inline Py_ssize_t record_end(Py_ssize_t at, Py_ssize_t size) {
    return (at + size + OE_RECORD_ALIGNMENT - 1) & -(Py_ssize_t)OE_RECORD_ALIGNMENT;
}

static inline void copy_in(Writer *w, const void *record, Py_ssize_t size, int64_t timestamp) {
    uint8_t *map = w->map;
    memcpy(map + w->cursor, record, (size_t)size); /* the padding after it is zero already */
    Py_ssize_t aligned = record_end(w->cursor, size);
    st64(map + w->base + OE_BH_TIMESTAMP_AT, (uint64_t)timestamp);
    publish32(map + w->base + OE_BH_OFFSET_AT, (uint32_t)(aligned - w->base)); /* last: now the record is in */
    w->cursor = aligned;
}

/* Refuse; or complete the FILLING buffer, open the next FREE one and write; or drop.
 * Returns 1 written / 0 not; *full the buffer that became FULL or -1. */
static int write_slow(Writer *w, const void *record, Py_ssize_t size, int64_t timestamp, long cpu, Py_ssize_t *full) {
    *full = -1;
    if (w->orphaned)
        return 0;
    if (size < OE_POOL_MIN_RECORD || size > w->max_record) {
        add64(w, OE_POOL_EVENTSREFUSED_AT);
        flag_loss(w);
        return 0;
    }
    if (w->index >= 0)
        *full = complete(w);
    Py_ssize_t free_index = find_free(w);
    if (free_index < 0) {
        add64(w, OE_POOL_EVENTSLOST_AT);
        flag_loss(w);
        return 0;
    }
    open_buffer(w, free_index, cpu);
    copy_in(w, record, size, timestamp);
    return 1;
}

static PyObject *became_full(Writer *w, Py_ssize_t full, PyObject *result) {
    if (full >= 0 && w->full != Py_None) {
        PyObject *index = PyLong_FromSsize_t(full);
        PyObject *r = index ? PyObject_CallOneArg(w->full, index) : NULL;
        Py_XDECREF(index);
        if (r == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(r);
    }
    return result;
}

static PyObject *Writer_write(Writer *w, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    /* write(record, timestamp, cpu=0): positional, or by these names, as the pure closure takes them */
    static const char *names[] = {"record", "timestamp", "cpu"};
    PyObject *given[3] = {NULL, NULL, NULL};
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "write() takes at most 3 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        given[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int i = 0; i < 3; i++)
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
                slot = i;
        if (slot < 0 || given[slot] != NULL) {
            PyErr_Format(PyExc_TypeError, slot < 0 ? "write() got an unexpected keyword argument '%U'" : "write() got multiple values for argument '%U'", key);
            return NULL;
        }
        given[slot] = args[nargs + k];
    }
    if (given[0] == NULL || given[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "write() needs record and timestamp");
        return NULL;
    }
    args = (PyObject *const *)given;
    nargs = given[2] != NULL ? 3 : 2;
    if (!w->mapped)
        return closed_error();
    int64_t timestamp = PyLong_AsLongLong(args[1]);
    if (timestamp == -1 && PyErr_Occurred())
        return NULL;
    long cpu = 0;
    if (nargs == 3) {
        cpu = PyLong_AsLong(args[2]);
        if (cpu == -1 && PyErr_Occurred())
            return NULL;
    }
    PyObject *record = args[0];
    const void *data;
    Py_ssize_t size;
    Py_buffer view;
    int have_view = 0;
    if (PyBytes_CheckExact(record)) {
        data = PyBytes_AS_STRING(record);
        size = PyBytes_GET_SIZE(record);
    } else {
        if (PyObject_GetBuffer(record, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        have_view = 1;
        data = view.buf;
        size = view.len;
    }
    if (w->cursor + size <= w->limit && size >= OE_POOL_MIN_RECORD && size <= w->max_record) {
        copy_in(w, data, size, timestamp);
        if (have_view)
            PyBuffer_Release(&view);
        Py_RETURN_TRUE;
    }
    Py_ssize_t full;
    int written = write_slow(w, data, size, timestamp, cpu, &full);
    if (have_view)
        PyBuffer_Release(&view);
    return became_full(w, full, written ? Py_NewRef(Py_True) : Py_NewRef(Py_False));
}

static PyObject *Writer_flush(Writer *w, PyObject *Py_UNUSED(ignored)) {
    if (!w->mapped)
        return closed_error();
    Py_ssize_t full = (w->index >= 0 && w->cursor > w->base + OE_BUFFER_HEADER_SIZE) ? complete(w) : -1;
    return became_full(w, full, Py_NewRef(full >= 0 ? Py_True : Py_False));
}

static PyObject *Writer_orphan(Writer *w, PyObject *Py_UNUSED(ignored)) {
    w->orphaned = 1;
    w->index = -1;
    w->limit = -1;
    Py_RETURN_NONE;
}

static void unmap(Writer *w) {
    if (w->mapped) {
        w->mapped = 0;
        w->map = NULL;
        w->index = -1;
        w->limit = -1;
        PyBuffer_Release(&w->view);
    }
}

static PyObject *Writer_release(Writer *w, PyObject *Py_UNUSED(ignored)) {
    unmap(w);
    Py_RETURN_NONE;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"mapping", "buffer_size", "buffer_count", "logger_id", "full", NULL};
    PyObject *mapping, *full;
    Py_ssize_t buffer_size, count;
    int logger_id;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnniO:PoolWriter", names, &mapping, &buffer_size, &count, &logger_id, &full))
        return NULL;
    if (full != Py_None && !PyCallable_Check(full)) {
        PyErr_SetString(PyExc_TypeError, "full must be callable or None");
        return NULL;
    }
    if (buffer_size < OE_BUFFER_HEADER_SIZE + OE_POOL_MIN_RECORD || buffer_size % OE_RECORD_ALIGNMENT || count < 1 ||
        OE_POOL_STATE_OFFSET + 4 * count > OE_POOL_HEADER_SIZE || logger_id < 0 || logger_id > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "not a buffer pool's shape");
        return NULL;
    }
    Writer *w = (Writer *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    if (PyObject_GetBuffer(mapping, &w->view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    w->mapped = 1;
    if (w->view.len < OE_POOL_HEADER_SIZE + count * buffer_size) {
        unmap(w);
        Py_DECREF(w);
        PyErr_SetString(PyExc_ValueError, "the mapping is smaller than the pool it should hold");
        return NULL;
    }
    w->map = w->view.buf;
    w->size = w->view.len;
    w->buffer_size = buffer_size;
    w->count = count;
    w->max_record = buffer_size - OE_BUFFER_HEADER_SIZE < OE_POOL_MAX_RECORD_SIZE ? buffer_size - OE_BUFFER_HEADER_SIZE : OE_POOL_MAX_RECORD_SIZE;
    w->logger_id = (uint16_t)logger_id;
    w->index = -1;
    w->limit = -1;
    w->full = Py_NewRef(full);
    return (PyObject *)w;
}

static void Writer_dealloc(Writer *w) {
    unmap(w);
    Py_XDECREF(w->full);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef Writer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))Writer_write, METH_FASTCALL | METH_KEYWORDS, "write(record, timestamp, cpu=0) -> bool: copy one record into the pool"},
    {"flush", (PyCFunction)Writer_flush, METH_NOARGS, "flush() -> bool: mark a non-empty FILLING buffer FULL"},
    {"orphan", (PyCFunction)Writer_orphan, METH_NOARGS, "orphan(): in a forked child, never touch the pool again"},
    {"release", (PyCFunction)Writer_release, METH_NOARGS, "release(): let the mapping go; later writes raise ValueError"},
    {NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._write.PoolWriter",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The producer's write path over one pool mapping (see ipc/pool.py).",
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};


/* ---------------------------------------------------------------------------------------------
 * FastWrite: one event's whole write outside any activity.
 *
 * plan = (kind, ops, types, names, variant, cae, bits, fixed_size)
 *   kind 0: f(values)                            values: a tuple of the fields' values
 *   kind 1: f(values, level, keyword, opcode)    values: a dict whose keys are ``names`` in order
 *   kind 2: f(v0, v1, ...) or by ``names``       route: a one-item list holding the write or None
 *   ops: one byte per field: a struct code (bBhHiIqQfd), 'G' a GUID's bytes_le, 'U' UTF-16 and
 *        '8' UTF-8 text with its NUL; types: per field the exact type a value must have, or None
 *   cae: the header's constant bytes (ProviderId .. ProcessorTime), the null activity id and the
 *        constant extended items; bits: the header's first u64 but for the size.
 */
#define OE_MAX_FIELDS 32

static unsigned fork_generation;
static _Thread_local long thread_id;
static _Thread_local unsigned thread_generation = (unsigned)-1;

static void after_fork_in_child(void) { fork_generation++; }

static inline long current_thread_id(void) {
    if (thread_generation != fork_generation) {
        thread_id = (long)syscall(SYS_gettid);
        thread_generation = fork_generation;
    }
    return thread_id;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    Py_ssize_t count;
    char ops[OE_MAX_FIELDS];
    PyObject *types[OE_MAX_FIELDS];
    PyObject *names; /* tuple of str, or None */
    long long level, keyword, opcode;
    int has_variant;
    int names_plain; /* kind 1: no field is named as an argument of TraceLoggingProvider.write */
    PyObject *cae;
    uint64_t bits;
    Py_ssize_t fixed_size;
    PyObject *python, *route, *activity, *no_activity, *pid, *clock, *unmapped;
} FastWrite;

typedef struct {
    PyObject *value;
    Py_ssize_t size;
    union { int64_t i; uint64_t u; double d; float f; } n;
    const void *data; /* '8': the UTF-8 bytes; 'G': the 16 bytes */
    PyObject *keep;   /* 'G': the bytes object */
} Field;

/* 1: the value packs as the generated code packs it; 0: the generated code decides. */
static int prepare(char op, PyObject *v, Field *f) {
    f->value = v;
    f->keep = NULL;
    switch (op) {
    case 'b': case 'B': case 'h': case 'H': case 'i': case 'I': case 'q': {
        if (!PyLong_CheckExact(v) && !PyBool_Check(v)) return 0;
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
        long long lo, hi;
        switch (op) {
        case 'b': lo = -128; hi = 127; f->size = 1; break;
        case 'B': lo = 0; hi = 255; f->size = 1; break;
        case 'h': lo = -32768; hi = 32767; f->size = 2; break;
        case 'H': lo = 0; hi = 65535; f->size = 2; break;
        case 'i': lo = INT32_MIN; hi = INT32_MAX; f->size = 4; break;
        case 'I': lo = 0; hi = UINT32_MAX; f->size = 4; break;
        default: lo = INT64_MIN; hi = INT64_MAX; f->size = 8; break;
        }
        if (x < lo || x > hi) return 0;
        f->n.i = x;
        return 1;
    }
    case 'Q': {
        if (!PyLong_CheckExact(v) && !PyBool_Check(v)) return 0;
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        f->n.u = x;
        f->size = 8;
        return 1;
    }
    case 'f': case 'd': {
        double x;
        if (PyFloat_CheckExact(v)) x = PyFloat_AS_DOUBLE(v);
        else if (PyLong_CheckExact(v)) {
            x = PyLong_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
        } else return 0;
        if (op == 'd') { f->n.d = x; f->size = 8; return 1; }
        float y = (float)x;
        if (isinf(y) && !isinf(x)) return 0; /* struct refuses it: too large for 'f' */
        f->n.f = y;
        f->size = 4;
        return 1;
    }
    case 'G': {
        PyObject *b = PyObject_GetAttrString(v, "bytes_le");
        if (b == NULL) { PyErr_Clear(); return 0; }
        if (!PyBytes_CheckExact(b) || PyBytes_GET_SIZE(b) != 16) { Py_DECREF(b); return 0; }
        f->keep = b;
        f->data = PyBytes_AS_STRING(b);
        f->size = 16;
        return 1;
    }
    case 'U': {
        if (!PyUnicode_Check(v) || PyUnicode_READY(v) < 0) { PyErr_Clear(); return 0; }
        Py_ssize_t n = PyUnicode_GET_LENGTH(v), units = n + 1;
        int kind = PyUnicode_KIND(v);
        const void *d = PyUnicode_DATA(v);
        if (kind == PyUnicode_1BYTE_KIND) { /* Latin-1: one unit per character */
            if (memchr(d, 0, (size_t)n) != NULL) return 0;
            f->size = 2 * units;
            return 1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, d, i);
            if (c == 0) return 0;
            if (c > 0xFFFF) units++;
        }
        f->size = 2 * units;
        return 1;
    }
    case '8': {
        if (!PyUnicode_Check(v)) return 0;
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(v, &n);
        if (u == NULL) { PyErr_Clear(); return 0; } /* a lone surrogate: strict UTF-8 refuses it */
        if (memchr(u, 0, (size_t)n) != NULL) return 0;
        f->data = u;
        f->size = n + 1;
        return 1;
    }
    }
    return 0;
}

static uint8_t *put(char op, const Field *f, uint8_t *p) {
    switch (op) {
    case 'b': case 'B': *p = (uint8_t)f->n.i; return p + 1;
    case 'h': case 'H': st16(p, (uint16_t)f->n.i); return p + 2;
    case 'i': case 'I': st32(p, (uint32_t)f->n.i); return p + 4;
    case 'q': case 'Q': st64(p, f->n.u); return p + 8;
    case 'f': memcpy(p, &f->n.f, 4); return p + 4;
    case 'd': memcpy(p, &f->n.d, 8); return p + 8;
    case 'G': case '8': memcpy(p, f->data, (size_t)f->size); return p + f->size;
    case 'U': {
        PyObject *v = f->value;
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        int kind = PyUnicode_KIND(v);
        const void *d = PyUnicode_DATA(v);
        if (kind == PyUnicode_2BYTE_KIND) {
            memcpy(p, d, (size_t)(2 * n));
            p += 2 * n;
        } else if (kind == PyUnicode_1BYTE_KIND) {
            const uint8_t *c = d;
            for (Py_ssize_t i = 0; i < n; i++)
                st16(p + 2 * i, c[i]);
            p += 2 * n;
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                Py_UCS4 c = PyUnicode_READ(kind, d, i);
                if (c > 0xFFFF) {
                    c -= 0x10000;
                    st16(p, (uint16_t)(0xD800 | (c >> 10)));
                    st16(p + sizeof(uint16_t), (uint16_t)(0xDC00 | (c & 0x3FF)));
                    p += 4;
                } else {
                    st16(p, (uint16_t)c);
                    p += 2;
                }
            }
        }
        st16(p, 0);
        return p + 2;
    }
    }
    return p;
}

static void encode(FastWrite *e, Field *fields, uint8_t *p, Py_ssize_t size, long tid, uint32_t pid, int64_t timestamp) {
    st64(p + OE_EH_SIZE_AT, (uint64_t)size + e->bits);
    st32(p + OE_EH_THREADID_AT, (uint32_t)tid);
    st32(p + OE_EH_PROCESSID_AT, pid);
    st64(p + OE_EH_TIMESTAMP_AT, (uint64_t)timestamp);
    Py_ssize_t cae = PyBytes_GET_SIZE(e->cae);
    memcpy(p + OE_EH_PROVIDERID_AT, PyBytes_AS_STRING(e->cae), (size_t)cae);
    p += OE_EH_PROVIDERID_AT + cae;
    for (Py_ssize_t i = 0; i < e->count; i++)
        p = put(e->ops[i], &fields[i], p);
}

static PyObject *delegate(FastWrite *e, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(e->python, args, nargsf, kwnames);
}

/* A marker result: the values are not ones this twin writes itself; the caller delegates. */
static PyObject not_handled_marker;
#define NOT_HANDLED (&not_handled_marker)

/* The write of one event's values outside any activity; NOT_HANDLED when the generated code
 * has to decide (an activity, a value of another type or out of range, a record over 64 KB). */
static PyObject *write_values(FastWrite *e, PyObject **values, PyObject *write) {
    PyObject *state = NULL;
    if (PyContextVar_Get(e->activity, NULL, &state) < 0)
        return NULL;
    int outside = state == e->no_activity;
    Py_XDECREF(state);
    if (!outside)
        return NOT_HANDLED;
    Field fields[OE_MAX_FIELDS];
    /* the header up to its TimeStamp, then cae: the rest of the header and the extended items */
    Py_ssize_t size = OE_EH_PROVIDERID_AT + PyBytes_GET_SIZE(e->cae);
    Py_ssize_t prepared = 0;
    PyObject *result = NULL;
    for (; prepared < e->count; prepared++) {
        PyObject *v = values[prepared];
        PyObject *type = e->types[prepared];
        if ((type != Py_None && (PyObject *)Py_TYPE(v) != type) || !prepare(e->ops[prepared], v, &fields[prepared]))
            goto give_up;
        size += fields[prepared].size;
    }
    if (size > OE_POOL_MAX_RECORD_SIZE)
        goto give_up;
    int64_t timestamp;
    if (e->clock == Py_None) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        timestamp = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    } else {
        PyObject *t = PyObject_CallNoArgs(e->clock);
        if (t == NULL) goto done;
        timestamp = PyLong_AsLongLong(t);
        Py_DECREF(t);
        if (timestamp == -1 && PyErr_Occurred()) goto done;
    }
    long tid = current_thread_id();
    PyObject *pid_object = PyList_GET_ITEM(e->pid, 0);
    uint32_t pid = (uint32_t)PyLong_AsUnsignedLong(pid_object);
    if (PyErr_Occurred()) goto done;
    if (PyCFunction_Check(write) && ((PyCFunctionObject *)write)->m_ml->ml_meth == (PyCFunction)(void (*)(void))Writer_write) {
        Writer *w = (Writer *)PyCFunction_GET_SELF(write);
        if (!w->mapped) {
            result = Py_NewRef(Py_False); /* its pool was unmapped: nobody wants the event */
            goto done;
        }
        if (w->cursor + size <= w->limit) {
            encode(e, fields, w->map + w->cursor, size, tid, pid, timestamp);
            Py_ssize_t aligned = record_end(w->cursor, size);
            st64(w->map + w->base + OE_BH_TIMESTAMP_AT, (uint64_t)timestamp);
            publish32(w->map + w->base + OE_BH_OFFSET_AT, (uint32_t)(aligned - w->base));
            w->cursor = aligned;
            result = Py_NewRef(Py_True);
            goto done;
        }
        uint8_t *scratch = PyMem_Malloc((size_t)size);
        if (scratch == NULL) { PyErr_NoMemory(); goto done; }
        encode(e, fields, scratch, size, tid, pid, timestamp);
        Py_ssize_t full;
        int written = write_slow(w, scratch, size, timestamp, 0, &full);
        PyMem_Free(scratch);
        result = became_full(w, full, Py_NewRef(written ? Py_True : Py_False));
        goto done;
    }
    PyObject *record = PyBytes_FromStringAndSize(NULL, size);
    if (record == NULL) goto done;
    encode(e, fields, (uint8_t *)PyBytes_AS_STRING(record), size, tid, pid, timestamp);
    PyObject *ts = PyLong_FromLongLong(timestamp);
    PyObject *zero = PyLong_FromLong(0);
    if (ts != NULL && zero != NULL) {
        PyObject *call[3] = {record, ts, zero};
        result = PyObject_Vectorcall(write, call, 3, NULL);
        if (result == NULL && PyErr_ExceptionMatches(e->unmapped)) {
            PyErr_Clear();
            result = Py_NewRef(Py_False);
        }
    }
    Py_XDECREF(ts);
    Py_XDECREF(zero);
    Py_DECREF(record);
    goto done;
give_up:
    for (Py_ssize_t i = 0; i < prepared; i++)
        Py_XDECREF(fields[i].keep);
    return NOT_HANDLED;
done:
    for (Py_ssize_t i = 0; i < prepared; i++)
        Py_XDECREF(fields[i].keep);
    return result;
}


static PyObject *FastWrite_call(FastWrite *e, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *values[OE_MAX_FIELDS];
    PyObject *write;
    if (e->kind == 2) {
        write = PyList_GET_ITEM(e->route, 0);
        if (write == Py_None) {
            /* the generated function says False at once; a wrong call is its TypeError */
            if (kwnames == NULL && nargs == e->count)
                Py_RETURN_FALSE;
            return delegate(e, args, nargsf, kwnames);
        }
        if (kwnames != NULL || nargs != e->count)
            return delegate(e, args, nargsf, kwnames);
        for (Py_ssize_t i = 0; i < nargs; i++)
            values[i] = args[i];
    } else {
        write = PyList_GET_ITEM(e->route, 0);
        if (kwnames != NULL || nargs != (e->kind == 1 ? 4 : 1))
            return delegate(e, args, nargsf, kwnames);
        if (e->kind == 1) {
            for (int i = 0; i < 3; i++)
                if (!PyLong_CheckExact(args[1 + i]))
                    return delegate(e, args, nargsf, kwnames);
            int overflow = 0;
            long long level = PyLong_AsLongLongAndOverflow(args[1], &overflow);
            long long keyword = overflow ? 0 : PyLong_AsLongLongAndOverflow(args[2], &overflow);
            long long opcode = overflow ? 0 : PyLong_AsLongLongAndOverflow(args[3], &overflow);
            if (overflow || level != e->level || keyword != e->keyword || opcode != e->opcode)
                return delegate(e, args, nargsf, kwnames);
            PyObject *d = args[0];
            if (!PyDict_CheckExact(d) || PyDict_GET_SIZE(d) != e->count)
                return delegate(e, args, nargsf, kwnames);
            Py_ssize_t pos = 0, i = 0;
            PyObject *key, *value;
            while (PyDict_Next(d, &pos, &key, &value)) {
                PyObject *name = PyTuple_GET_ITEM(e->names, i);
                if (key != name) {
                    if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(name))
                        return delegate(e, args, nargsf, kwnames);
                    int differs = PyUnicode_Compare(key, name);
                    if (differs == -1 && PyErr_Occurred())
                        return NULL;
                    if (differs)
                        return delegate(e, args, nargsf, kwnames);
                }
                values[i++] = value;
            }
        } else {
            PyObject *t = args[0];
            if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != e->count)
                return delegate(e, args, nargsf, kwnames);
            for (Py_ssize_t i = 0; i < e->count; i++)
                values[i] = PyTuple_GET_ITEM(t, i);
        }
    }
    PyObject *result = write_values(e, values, write);
    if (result == NOT_HANDLED)
        return delegate(e, args, nargsf, kwnames);
    return result;
}

static PyObject *FastWrite_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"plan", "python", "route", "activity", "no_activity", "pid", "clock", "unmapped", NULL};
    PyObject *plan, *python, *route, *activity, *no_activity, *pid, *clock, *unmapped;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!O!OO!OO:FastWrite", names, &plan, &python, &PyList_Type, &route, &PyContextVar_Type,
                                     &activity, &no_activity, &PyList_Type, &pid, &clock, &unmapped))
        return NULL;
    int kind;
    const char *ops;
    Py_ssize_t nops, fixed_size;
    PyObject *types, *field_names, *variant, *cae;
    unsigned long long bits;
    if (!PyArg_ParseTuple(plan, "is#O!OOO!Kn:plan", &kind, &ops, &nops, &PyTuple_Type, &types, &field_names, &variant, &PyBytes_Type, &cae, &bits, &fixed_size))
        return NULL;
    if (kind < 0 || kind > 2 || nops > OE_MAX_FIELDS || PyTuple_GET_SIZE(types) != nops || PyList_GET_SIZE(route) != 1 || PyList_GET_SIZE(pid) != 1 ||
        !PyCallable_Check(python) || (clock != Py_None && !PyCallable_Check(clock))) {
        PyErr_SetString(PyExc_ValueError, "not a FastWrite plan");
        return NULL;
    }
    if (kind == 1 && (!PyTuple_Check(field_names) || PyTuple_GET_SIZE(field_names) != nops || variant == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "a kind 1 plan names every field and has a variant");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nops; i++)
        if (strchr("bBhHiIqQfdGU8", ops[i]) == NULL || ops[i] == 0) {
            PyErr_Format(PyExc_ValueError, "unknown field op %c", ops[i]);
            return NULL;
        }
    FastWrite *e = (FastWrite *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    e->vectorcall = (vectorcallfunc)FastWrite_call;
    e->kind = kind;
    e->count = nops;
    memcpy(e->ops, ops, (size_t)nops);
    for (Py_ssize_t i = 0; i < nops; i++)
        e->types[i] = Py_NewRef(PyTuple_GET_ITEM(types, i));
    e->names = Py_NewRef(field_names);
    if (variant != Py_None) {
        if (!PyArg_ParseTuple(variant, "LLL", &e->level, &e->keyword, &e->opcode)) {
            Py_DECREF(e);
            return NULL;
        }
        e->has_variant = 1;
    }
    if (kind == 1) {
        static const char *bound_names[] = {"level", "keyword", "opcode", "event_name", "self"};
        e->names_plain = 1;
        for (Py_ssize_t i = 0; i < nops; i++) {
            PyObject *name = PyTuple_GET_ITEM(field_names, i);
            for (int j = 0; j < 5; j++)
                if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, bound_names[j]) == 0)
                    e->names_plain = 0;
        }
    }
    e->cae = Py_NewRef(cae);
    e->bits = bits;
    e->fixed_size = fixed_size;
    e->python = Py_NewRef(python);
    e->route = Py_NewRef(route);
    e->activity = Py_NewRef(activity);
    e->no_activity = Py_NewRef(no_activity);
    e->pid = Py_NewRef(pid);
    e->clock = Py_NewRef(clock);
    e->unmapped = Py_NewRef(unmapped);
    return (PyObject *)e;
}

static int FastWrite_traverse(FastWrite *e, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < e->count; i++)
        Py_VISIT(e->types[i]);
    Py_VISIT(e->names);
    Py_VISIT(e->python);
    Py_VISIT(e->route);
    Py_VISIT(e->clock);
    Py_VISIT(e->unmapped);
    return 0;
}

static int FastWrite_clear(FastWrite *e) {
    for (Py_ssize_t i = 0; i < e->count; i++)
        Py_CLEAR(e->types[i]);
    Py_CLEAR(e->names);
    Py_CLEAR(e->cae);
    Py_CLEAR(e->python);
    Py_CLEAR(e->route);
    Py_CLEAR(e->activity);
    Py_CLEAR(e->no_activity);
    Py_CLEAR(e->pid);
    Py_CLEAR(e->clock);
    Py_CLEAR(e->unmapped);
    return 0;
}

static void FastWrite_dealloc(FastWrite *e) {
    PyObject_GC_UnTrack(e);
    FastWrite_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyTypeObject FastWriteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._write.FastWrite",
    .tp_basicsize = sizeof(FastWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "One event's whole write outside any activity (see provider/encode_source.py's write_fast).",
    .tp_new = FastWrite_new,
    .tp_dealloc = (destructor)FastWrite_dealloc,
    .tp_traverse = (traverseproc)FastWrite_traverse,
    .tp_clear = (inquiry)FastWrite_clear,
    .tp_vectorcall_offset = offsetof(FastWrite, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* ---------------------------------------------------------------------------------------------
 * TraceLoggingWrite: ``TraceLoggingProvider.write(event_name, level=5, keyword=0, opcode=0,
 * **fields)`` as one call, for a provider whose fast write of this event is a FastWrite: the
 * fields go from the call's keywords to the record without a dict. Anything else (disabled
 * providers included: the method says False) is the method's, called with the same arguments.
 */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *provider, *method; /* the provider (weakly: it owns this) and the unbound method */
    PyObject *live;              /* [its fast writes (dict) while enabled, else None] */
} TraceLoggingWrite;

static PyObject *str_level, *str_keyword, *str_opcode;

static PyObject *tl_method(TraceLoggingWrite *t, PyObject *provider, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject **all = PyMem_Malloc(sizeof(PyObject *) * (size_t)(1 + nargs + nkw));
    if (all == NULL)
        return PyErr_NoMemory();
    all[0] = provider;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++)
        all[1 + i] = args[i];
    PyObject *r = PyObject_Vectorcall(t->method, all, (size_t)(nargs + 1), kwnames);
    PyMem_Free(all);
    return r;
}

static PyObject *TraceLoggingWrite_call(TraceLoggingWrite *t, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *provider = PyWeakref_GetObject(t->provider);
    if (provider == Py_None) {
        PyErr_SetString(PyExc_ReferenceError, "the provider is gone");
        return NULL;
    }
    Py_INCREF(provider);
    PyObject *result = NOT_HANDLED;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *routing = NULL;
    if (nargs < 1 || nargs > 4 || !PyUnicode_CheckExact(args[0]))
        goto out;
    if (PyList_GET_SIZE(t->live) != 1)
        goto out;
    routing = Py_NewRef(PyList_GET_ITEM(t->live, 0)); /* the fast writes; None: disabled */
    if (!PyDict_CheckExact(routing))
        goto out;
    PyObject *fast = PyDict_GetItemWithError(routing, args[0]);
    if (fast == NULL) {
        if (PyErr_Occurred())
            result = NULL;
        goto out;
    }
    if (Py_TYPE(fast) != &FastWriteType || ((FastWrite *)fast)->kind != 1)
        goto out;
    FastWrite *e = (FastWrite *)fast;
    Py_INCREF(e);
    PyObject *bound[3] = {NULL, NULL, NULL}; /* level, keyword, opcode */
    for (Py_ssize_t i = 1; i < nargs; i++)
        bound[i - 1] = args[i];
    PyObject *values[OE_MAX_FIELDS];
    Py_ssize_t count = 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int slot = key == str_level ? 0 : key == str_keyword ? 1 : key == str_opcode ? 2 : -1;
        if (slot < 0 && e->names_plain && count < e->count && key == PyTuple_GET_ITEM(e->names, count)) {
            values[count++] = args[nargs + k]; /* the field's own name object: none the method binds */
            continue;
        }
        if (slot < 0 && (PyUnicode_Compare(key, str_level) == 0 || PyUnicode_Compare(key, str_keyword) == 0 ||
                         PyUnicode_Compare(key, str_opcode) == 0 || PyUnicode_CompareWithASCIIString(key, "event_name") == 0 ||
                         PyUnicode_CompareWithASCIIString(key, "self") == 0))
            goto out_e; /* not interned, or a name the method binds itself: the method decides */
        if (slot >= 0) {
            if (bound[slot] != NULL)
                goto out_e;
            bound[slot] = args[nargs + k];
            continue;
        }
        if (count >= e->count)
            goto out_e;
        PyObject *name = PyTuple_GET_ITEM(e->names, count);
        if (key != name && PyUnicode_Compare(key, name) != 0)
            goto out_e;
        values[count++] = args[nargs + k];
    }
    if (count != e->count)
        goto out_e;
    long long given[3] = {5, 0, 0};
    for (int i = 0; i < 3; i++) {
        if (bound[i] == NULL)
            continue;
        if (!PyLong_CheckExact(bound[i]))
            goto out_e;
        int overflow = 0;
        given[i] = PyLong_AsLongLongAndOverflow(bound[i], &overflow);
        if (overflow)
            goto out_e;
    }
    if (given[0] != e->level || given[1] != e->keyword || given[2] != e->opcode)
        goto out_e;
    result = write_values(e, values, PyList_GET_ITEM(e->route, 0));
out_e:
    Py_DECREF(e);
out:
    if (PyErr_Occurred() && result == NOT_HANDLED)
        PyErr_Clear(); /* a comparison that failed: the method says what is wrong */
    Py_XDECREF(routing);
    if (result == NOT_HANDLED)
        result = tl_method(t, provider, args, nargsf, kwnames);
    Py_DECREF(provider);
    return result;
}

static PyObject *TraceLoggingWrite_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *provider, *method, *live;
    if (!PyArg_ParseTuple(args, "OOO!:TraceLoggingWrite", &provider, &method, &PyList_Type, &live))
        return NULL;
    if (PyList_GET_SIZE(live) != 1) {
        PyErr_SetString(PyExc_ValueError, "live is a one-item list");
        return NULL;
    }
    TraceLoggingWrite *t = (TraceLoggingWrite *)type->tp_alloc(type, 0);
    if (t == NULL)
        return NULL;
    t->provider = PyWeakref_NewRef(provider, NULL);
    if (t->provider == NULL) {
        Py_DECREF(t);
        return NULL;
    }
    t->vectorcall = (vectorcallfunc)TraceLoggingWrite_call;
    t->method = Py_NewRef(method);
    t->live = Py_NewRef(live);
    return (PyObject *)t;
}

static void TraceLoggingWrite_dealloc(TraceLoggingWrite *t) {
    Py_XDECREF(t->provider);
    Py_XDECREF(t->method);
    Py_XDECREF(t->live);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyTypeObject TraceLoggingWriteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._write.TraceLoggingWrite",
    .tp_basicsize = sizeof(TraceLoggingWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "TraceLoggingProvider.write for one provider, its fields straight from the call (see the method).",
    .tp_new = TraceLoggingWrite_new,
    .tp_dealloc = (destructor)TraceLoggingWrite_dealloc,
    .tp_vectorcall_offset = offsetof(TraceLoggingWrite, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* ---------------------------------------------------------------------------------------------
 * ProviderWrite: ``Provider.write(event, *values)`` as one call, for a provider whose fast write
 * of this encoder is a FastWrite of kind 0: the values go from the call's arguments to the record
 * without a tuple. Anything else (disabled providers included: the method says False) is the
 * method's, called with the same arguments.
 */
static PyObject *ProviderWrite_call(TraceLoggingWrite *t, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *provider = PyWeakref_GetObject(t->provider);
    if (provider == Py_None) {
        PyErr_SetString(PyExc_ReferenceError, "the provider is gone");
        return NULL;
    }
    Py_INCREF(provider);
    PyObject *result = NOT_HANDLED;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *routing = NULL;
    if (nargs < 1 || kwnames != NULL)
        goto out;
    if (PyList_GET_SIZE(t->live) != 1)
        goto out;
    routing = Py_NewRef(PyList_GET_ITEM(t->live, 0)); /* the fast writes; None: disabled */
    if (!PyDict_CheckExact(routing))
        goto out;
    PyObject *fast = PyDict_GetItemWithError(routing, args[0]);
    if (fast == NULL) {
        PyErr_Clear(); /* not there, or unhashable (a descriptor as a list): the method decides */
        goto out;
    }
    if (Py_TYPE(fast) != &FastWriteType || ((FastWrite *)fast)->kind != 0 || ((FastWrite *)fast)->count != nargs - 1)
        goto out;
    FastWrite *e = (FastWrite *)Py_NewRef(fast);
    result = write_values(e, (PyObject **)(args + 1), PyList_GET_ITEM(e->route, 0));
    Py_DECREF(e);
out:
    Py_XDECREF(routing);
    if (result == NOT_HANDLED)
        result = tl_method(t, provider, args, nargsf, kwnames);
    Py_DECREF(provider);
    return result;
}

static PyObject *ProviderWrite_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *made = TraceLoggingWrite_new(type, args, kwds);
    if (made != NULL)
        ((TraceLoggingWrite *)made)->vectorcall = (vectorcallfunc)ProviderWrite_call;
    return made;
}

static PyTypeObject ProviderWriteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._write.ProviderWrite",
    .tp_basicsize = sizeof(TraceLoggingWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Provider.write for one provider, its values straight from the call (see the method).",
    .tp_new = ProviderWrite_new,
    .tp_dealloc = (destructor)TraceLoggingWrite_dealloc,
    .tp_vectorcall_offset = offsetof(TraceLoggingWrite, vectorcall),
    .tp_call = PyVectorcall_Call,
};

/* ---------------------------------------------------------------------------------------------
 * screen: every record of one framed pool buffer, record by record (service/screen.py is the
 * reference: its runs of like records are a shortcut to the same answer).
 *
 * least: 256 u16 per header type for the EVENT_HEADER types (the smallest record of each), then
 * 256 more for the classic types; 0 where the type is not a producer's.
 * Returns (kept, rejected, spans, problems): spans a list of [start, end] (None when nothing was
 * rejected), problems up to 4 tuples (code, a, b): 0 bytes after the last record, 1 a record
 * shorter than its header, 2 a header type (a) and marker (b), 3 a Size (a) that does not fit,
 * 4 a process id (a), 5 an unregistered provider, 6 a secured GUID in a classic record, 7 a
 * thread id (a) of another process.
 */
#define OE_SCREEN_HEAD (OE_EH_PROVIDERID_AT + OE_EH_PROVIDERID_SIZE)
#define OE_SCREEN_TYPES 256 /* one least size per header type, a byte */

static int guid_in(const uint8_t *guid, const uint8_t *set, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (memcmp(guid, set + OE_EH_PROVIDERID_SIZE * i, OE_EH_PROVIDERID_SIZE) == 0)
            return 1;
    return 0;
}

static uint8_t *flat_guids(PyObject *set, Py_ssize_t *n) {
    Py_ssize_t size = PySet_GET_SIZE(set), i = 0;
    uint8_t *out = PyMem_Malloc(OE_EH_PROVIDERID_SIZE * (size_t)(size ? size : 1));
    PyObject *iterator = out != NULL ? PyObject_GetIter(set) : NULL, *key;
    if (iterator == NULL) {
        PyMem_Free(out);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return NULL;
    }
    while ((key = PyIter_Next(iterator)) != NULL) {
        if (PyBytes_Check(key) && PyBytes_GET_SIZE(key) == OE_EH_PROVIDERID_SIZE && i < size)
            memcpy(out + OE_EH_PROVIDERID_SIZE * i++, PyBytes_AS_STRING(key), OE_EH_PROVIDERID_SIZE);
        Py_DECREF(key);
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        PyMem_Free(out);
        return NULL;
    }
    *n = i;
    return out;
}

static int add_problem(PyObject *problems, int code, long long a, long long b) {
    if (PyList_GET_SIZE(problems) >= 4)
        return 0;
    PyObject *t = Py_BuildValue("(iLL)", code, a, b);
    if (t == NULL)
        return -1;
    int r = PyList_Append(problems, t);
    Py_DECREF(t);
    return r;
}

typedef struct {
    Py_ssize_t *at; /* start, end, start, end, ... */
    Py_ssize_t n, cap;
} spans_t;

static int keep_span(spans_t *spans, Py_ssize_t start, Py_ssize_t end) {
    if (spans->n && spans->at[2 * spans->n - 1] == start) {
        spans->at[2 * spans->n - 1] = end;
        return 0;
    }
    if (spans->n == spans->cap) {
        Py_ssize_t cap = spans->cap ? 2 * spans->cap : 16;
        Py_ssize_t *at = PyMem_Realloc(spans->at, sizeof(Py_ssize_t) * 2 * (size_t)cap);
        if (at == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        spans->at = at;
        spans->cap = cap;
    }
    spans->at[2 * spans->n] = start;
    spans->at[2 * spans->n + 1] = end;
    spans->n++;
    return 0;
}

static PyObject *span_list(const spans_t *spans) {
    PyObject *list = PyList_New(spans->n);
    for (Py_ssize_t i = 0; list != NULL && i < spans->n; i++) {
        PyObject *span = Py_BuildValue("[nn]", spans->at[2 * i], spans->at[2 * i + 1]);
        if (span == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, span);
    }
    return list;
}

static PyObject *screen(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long pid;
    PyObject *providers, *secured, *thread_ok, *known;
    int classic;
    const char *least;
    Py_ssize_t least_len;
    if (!PyArg_ParseTuple(args, "y*kO!O!py#OO:screen", &view, &pid, &PyFrozenSet_Type, &providers, &PyFrozenSet_Type, &secured, &classic, &least,
                          &least_len, &thread_ok, &known))
        return NULL;
    PyObject *result = NULL, *problems = NULL;
    spans_t spans = {NULL, 0, 0};
    uint8_t *mine = NULL, *theirs = NULL;
    Py_ssize_t n_mine = 0, n_theirs = 0;
    if (least_len != 2 * OE_SCREEN_TYPES * (Py_ssize_t)sizeof(uint16_t) || (known != Py_None && !PyAnySet_Check(known))) {
        PyErr_SetString(PyExc_ValueError, "screen: least holds 2 x 256 u16 sizes; known is a set or None");
        goto out;
    }
    mine = flat_guids(providers, &n_mine);
    theirs = flat_guids(secured, &n_theirs);
    problems = PyList_New(0);
    if (mine == NULL || theirs == NULL || problems == NULL)
        goto out;
    const uint8_t *d = view.buf;
    Py_ssize_t total = view.len;
    Py_ssize_t used = OE_BUFFER_HEADER_SIZE;
    if (total >= OE_BH_OFFSET_AT + (Py_ssize_t)sizeof(uint32_t)) {
        uint32_t offset;
        memcpy(&offset, d + OE_BH_OFFSET_AT, 4);
        used = (Py_ssize_t)offset < total ? (Py_ssize_t)offset : total;
    }
    Py_ssize_t position = OE_BUFFER_HEADER_SIZE, kept = 0, rejected = 0;
    uint32_t good_tid = 0;
    int have_good_tid = 0;
    while (position < used) {
        int code = -1;
        long long a = 0, b = 0;
        Py_ssize_t step = 0;
        const uint8_t *r = d + position;
        if (position + OE_POOL_MIN_RECORD > used) {
            code = 0;
        } else if (position + OE_SCREEN_HEAD > used) {
            code = 1;
        } else {
            uint16_t size, least_size;
            uint32_t tid, record_pid;
            memcpy(&size, r + OE_EH_SIZE_AT, 2);
            uint8_t header_type = r[OE_EH_HEADERTYPE_AT], marker = r[OE_EH_MARKERFLAGS_AT];
            memcpy(&tid, r + OE_EH_THREADID_AT, 4);
            memcpy(&record_pid, r + OE_EH_PROCESSID_AT, 4);
            uint16_t event_least, classic_least;
            memcpy(&event_least, least + sizeof(uint16_t) * header_type, 2);
            memcpy(&classic_least, least + sizeof(uint16_t) * (OE_SCREEN_TYPES + header_type), 2);
            least_size = event_least ? event_least : (classic ? classic_least : 0);
            if (least_size == 0 || marker != OE_TYPED_FLAGS) {
                code = 2; a = header_type; b = marker;
            } else if (size < least_size || position + size > used) {
                code = 3; a = size;
            } else {
                step = record_end(0, size);
                const uint8_t *guid = r + OE_EH_PROVIDERID_AT;
                if (record_pid != pid) {
                    code = 4; a = record_pid;
                } else if (event_least ? !guid_in(guid, mine, n_mine) : (guid_in(guid, theirs, n_theirs) && !guid_in(guid, mine, n_mine))) {
                    code = event_least ? 5 : 6;
                } else if (!(have_good_tid && tid == good_tid)) {
                    PyObject *t = PyLong_FromUnsignedLong(tid);
                    if (t == NULL)
                        goto out;
                    int ok = known != Py_None ? PySet_Contains(known, t) : 0;
                    if (ok == 0) {
                        PyObject *answer = PyObject_CallOneArg(thread_ok, t);
                        ok = answer == NULL ? -1 : PyObject_IsTrue(answer);
                        Py_XDECREF(answer);
                    }
                    Py_DECREF(t);
                    if (ok < 0)
                        goto out;
                    if (ok) {
                        good_tid = tid;
                        have_good_tid = 1;
                    } else {
                        code = 7; a = tid;
                    }
                }
            }
        }
        if (code < 0) {
            if (keep_span(&spans, position, position + step) < 0)
                goto out;
            kept++;
            position += step;
            continue;
        }
        rejected++;
        if (add_problem(problems, code, a, b) < 0)
            goto out;
        if (step == 0)
            break;
        position += step;
    }
    if (rejected) {
        PyObject *list = span_list(&spans);
        if (list != NULL)
            result = Py_BuildValue("(nnNO)", kept, rejected, list, problems);
    } else {
        result = Py_BuildValue("(nnOO)", kept, rejected, Py_None, problems);
    }
out:
    PyBuffer_Release(&view);
    PyMem_Free(mine);
    PyMem_Free(theirs);
    PyMem_Free(spans.at);
    Py_XDECREF(problems);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * take_release_into: ``BufferPool.take_into`` then ``release`` of one FULL buffer (ipc/pool.py
 * is the reference): FULL -> TAKEN, the WMI_BUFFER_HEADER the service vouches for and the
 * records into ``out``, 0xFF after them, the pool's buffer zeroed with Offset 0x48, -> FREE.
 * Returns whether the buffer's Offset had to be discarded (the records could not be framed).
 */
static PyObject *take_release_into(PyObject *self, PyObject *args) {
    Py_buffer pool, out;
    Py_ssize_t index, buffer_size;
    int logger_id;
    if (!PyArg_ParseTuple(args, "w*nniw*:take_release_into", &pool, &index, &buffer_size, &logger_id, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t base = OE_POOL_HEADER_SIZE + index * buffer_size;
    if (index < 0 || OE_POOL_STATE_OFFSET + 4 * (index + 1) > OE_POOL_HEADER_SIZE || base + buffer_size > pool.len || out.len != buffer_size ||
        buffer_size < OE_BUFFER_HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "take_release_into: not a buffer of this pool");
        goto done;
    }
    uint8_t *map = pool.buf, *h = map + base, *o = out.buf;
    uint8_t *state = map + OE_POOL_STATE_OFFSET + 4 * index;
    if (acquire32(state) != OE_STATE_FULL) {
        PyErr_SetString(PyExc_ValueError, "take_release_into: the buffer is not FULL");
        goto done;
    }
    publish32(state, OE_STATE_TAKEN);
    uint8_t header[OE_BUFFER_HEADER_SIZE];
    memcpy(header, h, OE_BUFFER_HEADER_SIZE); /* read once: the producer's later stores change nothing here */
    uint32_t used;
    uint16_t flags;
    memcpy(&used, header + OE_BH_OFFSET_AT, 4);
    memcpy(&flags, header + OE_BH_BUFFERFLAG_AT, 2);
    int repaired = used < OE_BUFFER_HEADER_SIZE || used > (uint32_t)buffer_size || used % OE_RECORD_ALIGNMENT;
    if (repaired)
        used = OE_BUFFER_HEADER_SIZE;
    flags = (uint16_t)((flags & OE_PRODUCER_FLAGS) | OE_BUFFER_FLAG_PROCESSOR_INDEX);
    memset(o, 0, OE_BUFFER_HEADER_SIZE);
    st32(o + OE_BH_BUFFERSIZE_AT, (uint32_t)buffer_size);
    st32(o + OE_BH_SAVEDOFFSET_AT, used);
    st32(o + OE_BH_CURRENTOFFSET_AT, used);
    memcpy(o + OE_BH_TIMESTAMP_AT, header + OE_BH_TIMESTAMP_AT, 8);
    memcpy(o + OE_BH_SEQUENCENUMBER_AT, header + OE_BH_SEQUENCENUMBER_AT, 8);
    memcpy(o + OE_BH_PROCESSORINDEX_AT, header + OE_BH_PROCESSORINDEX_AT, 2);
    st16(o + OE_BH_LOGGERID_AT, (uint16_t)logger_id);
    st32(o + OE_BH_STATE_AT, OE_BUFFER_STATE_WRITTEN);
    st32(o + OE_BH_OFFSET_AT, used);
    st16(o + OE_BH_BUFFERFLAG_AT, flags);
    st16(o + OE_BH_BUFFERTYPE_AT, OE_BUFFER_TYPE_GENERIC);
    memcpy(o + OE_BUFFER_HEADER_SIZE, h + OE_BUFFER_HEADER_SIZE, used - OE_BUFFER_HEADER_SIZE);
    memset(o + used, 0xFF, (size_t)(buffer_size - used));
    memset(h, 0, (size_t)buffer_size);
    st32(h + OE_BH_OFFSET_AT, OE_BUFFER_HEADER_SIZE);
    publish32(state, OE_STATE_FREE);
    result = PyBool_FromLong(repaired);
done:
    PyBuffer_Release(&pool);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *constants(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:(iiii)}",
        "buffer_header_size", OE_BUFFER_HEADER_SIZE, "timestamp_at", OE_BH_TIMESTAMP_AT, "offset_at", OE_BH_OFFSET_AT,
        "flags_at", OE_BH_BUFFERFLAG_AT, "pool_header_size", OE_POOL_HEADER_SIZE, "state_offset", OE_POOL_STATE_OFFSET,
        "events_lost_at", OE_POOL_EVENTSLOST_AT, "buffers_completed_at", OE_POOL_BUFFERSCOMPLETED_AT,
        "states", OE_STATE_FREE, OE_STATE_FILLING, OE_STATE_FULL, OE_STATE_TAKEN);
}

static PyMethodDef module_methods[] = {
    {"constants", constants, METH_NOARGS, "the constants this module was built with"},
    {"take_release_into", take_release_into, METH_VARARGS, "take_release_into(pool, index, buffer_size, logger_id, out) -> repaired"},
    {"screen", screen, METH_VARARGS, "screen(data, pid, providers, secured, classic, least, thread_ok, known) -> (kept, rejected, spans, problems)"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "openetw._native._write", "The compiled twin of the producer's write path.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__write(void) {
    if (PyType_Ready(&WriterType) < 0 || PyType_Ready(&FastWriteType) < 0 || PyType_Ready(&TraceLoggingWriteType) < 0 ||
        PyType_Ready(&ProviderWriteType) < 0)
        return NULL;
    str_level = PyUnicode_InternFromString("level");
    str_keyword = PyUnicode_InternFromString("keyword");
    str_opcode = PyUnicode_InternFromString("opcode");
    if (!str_level || !str_keyword || !str_opcode)
        return NULL;
    pthread_atfork(NULL, NULL, after_fork_in_child);
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "PoolWriter", (PyObject *)&WriterType) < 0 || PyModule_AddObjectRef(m, "FastWrite", (PyObject *)&FastWriteType) < 0 ||
        PyModule_AddObjectRef(m, "TraceLoggingWrite", (PyObject *)&TraceLoggingWriteType) < 0 ||
        PyModule_AddObjectRef(m, "ProviderWrite", (PyObject *)&ProviderWriteType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
