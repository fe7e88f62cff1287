/* openetw._native._read: the compiled twin of the read side's hot loops.
 *
 *   inflate(data, output_size)             LZXPRESS plain LZ77, as etl/lzxpress.py decompress_python
 *   configure(base, classes, message)      the record classes walk() builds (slots set directly)
 *   walk(data, pos, end, cpu, ctx, buffer, limit)  up to limit records of a buffer, as EtlReader._walk
 *   chains(blob, bases, ends)              every buffer's record chain, as index_walk.walk_chains
 *   rows(blob, offsets, ...)               the index's header columns, as index_build._framed_rows
 *   field(index, doc)                      a header field descriptor, as record._tuple_field's property
 *   columns(blob, starts, lengths, plan)   a schema's payloads as field columns, as tdh/columns.py plans them
 *
 * Every constant comes from _read_constants.h, generated from etl/layouts.py and etl/framing.py
 * (python -m openetw._native.gen). The pure-Python code is the reference: the C reproduces its
 * results and its errors, offsets included, and tests hold the two together.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#include "_read_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._read reads little-endian data with native loads"
#endif

static PyObject *CompressionError;
static PyObject *InvalidArgument;

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* ---------------------------------------------------------------------------------------------
 * LZXPRESS inflation. The pure decoder checks damage per group of 32 symbols (the output may run
 * past output_size inside a group and is judged at the group's end), and finds the end of the
 * input by the first read past it; this one checks every read but reports exactly what the pure
 * one reports, at the same offsets.
 */
enum { LZ_OK, LZ_ENDS, LZ_DISTANCE, LZ_FIELD, LZ_OVERRUN, LZ_PAST, LZ_LEFT, LZ_NOMEM };

/* The most a group of 32 symbols can write past output_size before the group-end check: 32
 * matches whose 8-bit length field says 254 (a longer one is checked against the room left). */
#define LZ_SLACK (32 * (OE_LZ_MIN_MATCH + 7 + 15 + 254))

typedef struct {
    int code;
    Py_ssize_t offset;
    long long a, b;
} lz_status;

typedef struct {
    uint8_t *p;
    size_t len, cap, limit;
} lz_out;

static int lz_grow(lz_out *o, size_t need) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < need) cap *= 2;
    if (cap > o->limit) cap = o->limit;
    if (cap < need) return -1;
    uint8_t *p = PyMem_RawRealloc(o->p, cap ? cap : 1);
    if (p == NULL) return -1;
    o->p = p;
    o->cap = cap;
    return 0;
}

#define LZ_FAIL(c, off, va, vb) do { st.code = (c); st.offset = (Py_ssize_t)(off); st.a = (va); st.b = (vb); return st; } while (0)
#define LZ_NEED(k) do { if (ip + (k) > n) goto input_end; } while (0)
#define LZ_ROOM(k) do { if (o->len + (k) > o->cap && lz_grow(o, o->len + (k)) < 0) LZ_FAIL(LZ_NOMEM, 0, 0, 0); } while (0)

static lz_status lz_inflate(const uint8_t *src, size_t n, size_t output_size, lz_out *o) {
    lz_status st = {LZ_OK, 0, 0, 0};
    size_t ip = 0, group_start = 0, half = 0, produced = 0;
    while (produced < output_size) {
        group_start = ip;
        int guarded = produced < OE_LZ_MAX_DISTANCE;
        LZ_NEED(4);
        uint32_t flags = rd32(src + ip);
        ip += 4;
        for (int bit = 31; bit >= 0; bit--) {
            if (!((flags >> bit) & 1)) {
                if (ip < n) {
                    LZ_ROOM(1);
                    o->p[o->len++] = src[ip];
                }
                ip++; /* a literal run cut short by the end leaves ip past it, as a slice does */
                continue;
            }
            size_t token_at = ip;
            LZ_NEED(2);
            uint32_t token = rd16(src + ip);
            ip += 2;
            size_t length = (token & 7) + OE_LZ_MIN_MATCH;
            if (length == 10) {
                uint32_t nibble;
                if (half) {
                    nibble = src[half] >> 4;
                    half = 0;
                } else {
                    LZ_NEED(1);
                    nibble = src[ip] & 15;
                    half = ip;
                    ip++;
                }
                if (nibble < 15) {
                    length = nibble + 10;
                } else {
                    LZ_NEED(1);
                    length = src[ip];
                    ip++;
                    if (length < 255) {
                        length += 25;
                    } else {
                        LZ_NEED(2);
                        uint64_t field = rd16(src + ip);
                        size_t end = ip + 2;
                        if (!field) {
                            LZ_NEED(6);
                            field = rd32(src + ip + sizeof(uint16_t));
                            end = ip + 6;
                        }
                        if (field < OE_LZ_SMALLEST_LENGTH_FIELD) LZ_FAIL(LZ_FIELD, ip, (long long)field, 0);
                        long long room = (long long)output_size - (long long)o->len;
                        long long want = (long long)field + OE_LZ_MIN_MATCH;
                        if (want > room) LZ_FAIL(LZ_OVERRUN, ip, want, room);
                        length = (size_t)want;
                        ip = end;
                    }
                }
            }
            size_t distance = (token >> 3) + 1;
            if (guarded && o->len < distance) LZ_FAIL(LZ_DISTANCE, token_at, (long long)distance, (long long)o->len);
            LZ_ROOM(length);
            uint8_t *dst = o->p + o->len;
            const uint8_t *from = dst - distance;
            if (distance >= length) {
                memcpy(dst, from, length);
            } else {
                for (size_t i = 0; i < length; i++) dst[i] = from[i];
            }
            o->len += length;
        }
        produced = o->len;
        if (produced > output_size) LZ_FAIL(LZ_PAST, group_start, 0, 0);
    }
    if (n > ip && n - ip > 4) LZ_FAIL(LZ_LEFT, ip, (long long)(n - ip), 0);
    return st;
input_end:
    produced = o->len;
    if (produced < output_size) LZ_FAIL(LZ_ENDS, ip < n ? ip : n, (long long)produced, 0);
    if (produced > output_size) LZ_FAIL(LZ_PAST, group_start, 0, 0);
    if (n > ip && n - ip > 4) LZ_FAIL(LZ_LEFT, ip, (long long)(n - ip), 0);
    return st;
}

static PyObject *raise_compression(const lz_status *st, size_t output_size) {
    PyObject *message;
    switch (st->code) {
    case LZ_ENDS:
        message = PyUnicode_FromFormat("compressed data ends after %lld of %zu bytes", st->a, output_size);
        break;
    case LZ_DISTANCE:
        message = PyUnicode_FromFormat("match distance %lld reaches before the start of the output (%lld bytes so far)", st->a, st->b);
        break;
    case LZ_FIELD:
        message = PyUnicode_FromFormat("long match length field holds %lld, below %d", st->a, OE_LZ_SMALLEST_LENGTH_FIELD);
        break;
    case LZ_OVERRUN:
        message = PyUnicode_FromFormat("match of %lld bytes overruns the output (%lld bytes left)", st->a, st->b);
        break;
    case LZ_PAST:
        message = PyUnicode_FromFormat("data inflates past the expected %zu bytes", output_size);
        break;
    case LZ_LEFT:
        message = PyUnicode_FromFormat("%lld bytes of compressed data left after %zu bytes of output", st->a, output_size);
        break;
    default:
        return PyErr_NoMemory();
    }
    if (message == NULL) return NULL;
    PyObject *args = PyTuple_Pack(1, message);
    Py_DECREF(message);
    if (args == NULL) return NULL;
    PyObject *kwargs = Py_BuildValue("{s:n}", "offset", st->offset);
    if (kwargs == NULL) {
        Py_DECREF(args);
        return NULL;
    }
    PyObject *exc = PyObject_Call(CompressionError, args, kwargs);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    if (exc == NULL) return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *py_inflate(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "inflate(data, output_size) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t output_size = PyLong_AsSsize_t(args[1]);
    if (output_size == -1 && PyErr_Occurred()) return NULL;
    if (output_size < 0) {
        PyErr_Format(InvalidArgument, "output_size must not be negative, got %zd", output_size);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    size_t limit = (size_t)output_size + LZ_SLACK;
    size_t start = (size_t)view.len * 16 + 4096;
    lz_out o = {NULL, 0, 0, limit};
    lz_status st;
    if (lz_grow(&o, start < limit ? start : limit) < 0) {
        st.code = LZ_NOMEM;
    } else {
        Py_BEGIN_ALLOW_THREADS
        st = lz_inflate(view.buf, (size_t)view.len, (size_t)output_size, &o);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (st.code == LZ_OK)
        result = PyBytes_FromStringAndSize((const char *)o.p, (Py_ssize_t)o.len);
    else
        raise_compression(&st, (size_t)output_size);
    PyMem_RawFree(o.p);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * Records. configure() names the record classes; walk() builds a buffer's records without
 * running Python: each is allocated and its slots (_h, _raw, _pos, _size, cpu, _ctx,
 * buffer_index) are set where EventRecord's member descriptors say they are.
 */
enum { SLOT_H, SLOT_RAW, SLOT_POS, SLOT_SIZE, SLOT_CPU, SLOT_CTX, SLOT_BUFFER, SLOT_COUNT };
static const char *const slot_names[SLOT_COUNT] = {"_h", "_raw", "_pos", "_size", "cpu", "_ctx", "buffer_index"};
static Py_ssize_t slot_offsets[SLOT_COUNT];
static Py_ssize_t record_basicsize;
static PyTypeObject *record_base;

typedef struct {
    unsigned header_size, size_at;
    const char *fields;
    PyTypeObject *cls;
    int kind;
} kind_row;

static kind_row typed_rows[256];
static kind_row message_row = {OE_MESSAGE_HEADER_SIZE, OE_MESSAGE_SIZE_AT, OE_MESSAGE_FIELDS, NULL, OE_MESSAGE_KIND};

static void set_rows(void) {
#define OE_ROW(TYPE, KIND, SIZE, SIZE_AT, FIELDS, STRUCTURE) \
    typed_rows[TYPE].header_size = SIZE; typed_rows[TYPE].size_at = SIZE_AT; typed_rows[TYPE].fields = FIELDS; typed_rows[TYPE].kind = KIND;
    OE_HEADER_KINDS(OE_ROW)
#undef OE_ROW
}

static int take_class(PyObject *cls, PyTypeObject *base, PyTypeObject **slot) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, base) ||
        ((PyTypeObject *)cls)->tp_basicsize != record_basicsize) {
        PyErr_Format(PyExc_TypeError, "%R is not a record class without slots of its own", cls);
        return -1;
    }
    Py_INCREF(cls);
    Py_XSETREF(*slot, (PyTypeObject *)cls);
    return 0;
}

static PyObject *py_configure(PyObject *self, PyObject *args) {
    PyObject *base, *classes, *message;
    if (!PyArg_ParseTuple(args, "O!O!O:configure", &PyType_Type, &base, &PyDict_Type, &classes, &message)) return NULL;
    PyObject *dict = ((PyTypeObject *)base)->tp_dict;
    for (int i = 0; i < SLOT_COUNT; i++) {
        PyObject *descr = PyDict_GetItemString(dict, slot_names[i]);
        if (descr == NULL || !PyObject_TypeCheck(descr, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%R has no slot %s", base, slot_names[i]);
            return NULL;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "%R.%s is not an object slot", base, slot_names[i]);
            return NULL;
        }
        slot_offsets[i] = member->offset;
    }
    record_basicsize = ((PyTypeObject *)base)->tp_basicsize;
    Py_INCREF(base);
    Py_XSETREF(record_base, (PyTypeObject *)base);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(classes, &pos, &key, &value)) {
        long t = PyLong_AsLong(key);
        if (t < 0 || t > 255 || typed_rows[t].fields == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "header type %R has no row in the generated constants", key);
            return NULL;
        }
        if (take_class(value, (PyTypeObject *)base, &typed_rows[t].cls) < 0) return NULL;
    }
    if (take_class(message, (PyTypeObject *)base, &message_row.cls) < 0) return NULL;
    Py_RETURN_NONE;
}

/* The header tuple struct.unpack_from would give for these codes ("<" implied; digits count). */
static PyObject *unpack_header(const uint8_t *p, const char *codes, Py_ssize_t count) {
    PyObject *t = PyTuple_New(count);
    if (t == NULL) return NULL;
    Py_ssize_t i = 0;
    for (const char *c = codes; *c; c++) {
        unsigned repeat = 0;
        while (*c >= '0' && *c <= '9') repeat = repeat * 10 + (unsigned)(*c++ - '0');
        PyObject *v;
        switch (*c) {
        case 's': v = PyBytes_FromStringAndSize((const char *)p, repeat); p += repeat; break;
        case 'B': v = PyLong_FromLong(p[0]); p += 1; break;
        case 'b': v = PyLong_FromLong((int8_t)p[0]); p += 1; break;
        case 'H': v = PyLong_FromLong(rd16(p)); p += 2; break;
        case 'h': v = PyLong_FromLong((int16_t)rd16(p)); p += 2; break;
        case 'I': v = PyLong_FromUnsignedLong(rd32(p)); p += 4; break;
        case 'i': v = PyLong_FromLong((int32_t)rd32(p)); p += 4; break;
        case 'Q': { uint64_t x; memcpy(&x, p, 8); v = PyLong_FromUnsignedLongLong(x); p += 8; break; }
        case 'q': { int64_t x; memcpy(&x, p, 8); v = PyLong_FromLongLong(x); p += 8; break; }
        default: v = NULL; PyErr_Format(PyExc_SystemError, "struct code %c", *c);
        }
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i++, v);
    }
    return t;
}

static Py_ssize_t field_count(const char *codes) {
    Py_ssize_t n = 0;
    for (const char *c = codes; *c; c++)
        if (!(*c >= '0' && *c <= '9')) n++;
    return n;
}

static Py_ssize_t counts[256], message_count;

static PyObject *new_record(PyTypeObject *cls, PyObject *h, PyObject *data, size_t pos, unsigned size,
                            PyObject *cpu, PyObject *ctx, PyObject *buffer) {
    PyObject *r = cls->tp_alloc(cls, 0);
    if (r == NULL) {
        Py_DECREF(h);
        return NULL;
    }
    PyObject *values[SLOT_COUNT] = {h, data, PyLong_FromSize_t(pos), PyLong_FromUnsignedLong(size), cpu, ctx, buffer};
    if (values[SLOT_POS] == NULL || values[SLOT_SIZE] == NULL) {
        Py_XDECREF(values[SLOT_POS]);
        Py_XDECREF(values[SLOT_SIZE]);
        Py_DECREF(h);
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(data);
    Py_INCREF(cpu);
    Py_INCREF(ctx);
    Py_INCREF(buffer);
    for (int i = 0; i < SLOT_COUNT; i++) *(PyObject **)((char *)r + slot_offsets[i]) = values[i];
    return r;
}

enum { STOP_END, STOP_UNKNOWN_TYPE, STOP_NO_HEADER, STOP_HEADER_PAST, STOP_SIZE, STOP_MORE };

static PyObject *py_walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "walk(data, pos, end, cpu, ctx, buffer_index, limit) takes 7 arguments");
        return NULL;
    }
    if (record_basicsize == 0) {
        PyErr_SetString(PyExc_RuntimeError, "walk() before configure()");
        return NULL;
    }
    PyObject *data = args[0], *cpu = args[3], *ctx = args[4], *buffer = args[5];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[6]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (start < 0 || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "walk: pos must not be negative and limit must be positive");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *buf = view.buf;
    if (end > view.len) end = view.len;
    PyObject *records = PyList_New(0);
    if (records == NULL) goto fail;
    size_t pos = (size_t)start;
    int stop = STOP_END;
    uint32_t marker = 0;
    unsigned size = 0;
    int header_type = 0;
    while ((Py_ssize_t)(pos + 4) <= end) {
        if (PyList_GET_SIZE(records) == limit) {
            stop = STOP_MORE;
            break;
        }
        marker = rd32(buf + pos);
        uint32_t flags = marker >> OE_MARKER_FLAGS_SHIFT;
        header_type = (uint8_t)(marker >> OE_MARKER_TYPE_SHIFT); /* a byte of the marker */
        const kind_row *row;
        if (marker == OE_END_OF_DATA) {
            break;
        } else if ((flags & OE_TYPED_FLAGS_MASK) == OE_TYPED_FLAGS_MASK) {
            row = &typed_rows[header_type];
            if (row->cls == NULL) {
                stop = STOP_UNKNOWN_TYPE;
                break;
            }
        } else if ((flags & OE_MESSAGE_FLAGS_MASK) == OE_MESSAGE_FLAGS) {
            row = &message_row;
            header_type = -1;
        } else {
            stop = STOP_NO_HEADER;
            break;
        }
        if ((Py_ssize_t)(pos + row->header_size) > end) {
            stop = STOP_HEADER_PAST;
            break;
        }
        size = rd16(buf + pos + row->size_at);
        if (size < row->header_size || (Py_ssize_t)(pos + size) > end) {
            stop = STOP_SIZE;
            break;
        }
        Py_ssize_t count = header_type >= 0 ? counts[header_type] : message_count;
        PyObject *h = unpack_header(buf + pos, row->fields, count);
        if (h == NULL) goto fail;
        PyObject *r = new_record(row->cls, h, data, pos, size, cpu, ctx, buffer);
        if (r == NULL) goto fail;
        int appended = PyList_Append(records, r);
        Py_DECREF(r);
        if (appended < 0) goto fail;
        pos += (size + OE_RECORD_ALIGNMENT - 1) & ~(size_t)(OE_RECORD_ALIGNMENT - 1);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NniIIi)", records, (Py_ssize_t)pos, stop, (unsigned)marker, size, header_type);
fail:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * The index pass's chains: buffers laid end to end in one blob (bases[i], ends[i] in bytes).
 * Gives every record's blob offset, size and buffer position, and where each chain stopped.
 */
static PyObject *py_chains(PyObject *self, PyObject *args) {
    Py_buffer blob, bases, ends;
    if (!PyArg_ParseTuple(args, "y*y*y*:chains", &blob, &bases, &ends)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = bases.len / 8;
    uint8_t *offsets = NULL, *sizes = NULL, *positions = NULL, *stops = NULL;
    if (ends.len / 8 != count) {
        PyErr_SetString(PyExc_ValueError, "bases and ends differ in length");
        goto done;
    }
    const int64_t *base = bases.buf, *end = ends.buf;
    const uint8_t *b = blob.buf;
    /* header size and where Size sits per marker key (flags << 8 | header type); 0: no record */
    static uint16_t key_header[1 << 16];
    static uint8_t key_size_at[1 << 16];
    static int keys_ready;
    if (!keys_ready) {
        for (unsigned key = 0; key < (1u << 16); key++) {
            unsigned type = key & 0xFF, flags = key >> 8;
            if ((flags & OE_TYPED_FLAGS_MASK) == OE_TYPED_FLAGS_MASK) {
                key_header[key] = typed_rows[type].fields ? (uint16_t)typed_rows[type].header_size : 0;
                key_size_at[key] = (uint8_t)typed_rows[type].size_at;
            } else if ((flags & OE_MESSAGE_FLAGS_MASK) == OE_MESSAGE_FLAGS) {
                key_header[key] = OE_MESSAGE_HEADER_SIZE;
                key_size_at[key] = OE_MESSAGE_SIZE_AT;
            }
        }
        keys_ready = 1;
    }
    size_t cap = 1024, n = 0;
    offsets = PyMem_RawMalloc(cap * 8);
    sizes = PyMem_RawMalloc(cap * 8);
    positions = PyMem_RawMalloc(cap * 8);
    stops = PyMem_RawMalloc((size_t)(count ? count : 1) * 8);
    if (!offsets || !sizes || !positions || !stops) {
        PyErr_NoMemory();
        goto done;
    }
    int nomem = 0, range = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count && !nomem && !range; i++) {
        int64_t at = base[i], stop_end = end[i];
        if (at < 0 || stop_end < 0 || at + stop_end > (int64_t)blob.len) {
            range = 1;
            break;
        }
        int64_t pos = OE_RECORDS_START;
        while (pos + 4 <= stop_end) {
            uint32_t marker = rd32(b + at + pos);
            unsigned key = marker >> OE_MARKER_KEY_SHIFT;
            unsigned header = key_header[key];
            if (!header || pos + header > stop_end) break;
            unsigned size = rd16(b + at + pos + key_size_at[key]);
            if (size < header || pos + size > stop_end) break;
            if (n == cap) {
                cap *= 2;
                uint8_t *o2 = PyMem_RawRealloc(offsets, cap * 8), *s2, *p2;
                if (o2) offsets = o2;
                s2 = o2 ? PyMem_RawRealloc(sizes, cap * 8) : NULL;
                if (s2) sizes = s2;
                p2 = s2 ? PyMem_RawRealloc(positions, cap * 8) : NULL;
                if (p2) positions = p2;
                if (!p2) {
                    nomem = 1;
                    break;
                }
            }
            ((int64_t *)offsets)[n] = at + pos;
            ((int64_t *)sizes)[n] = size;
            ((int64_t *)positions)[n] = i;
            n++;
            pos += (size + OE_RECORD_ALIGNMENT - 1) & ~(int64_t)(OE_RECORD_ALIGNMENT - 1);
        }
        ((int64_t *)stops)[i] = pos;
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (range) {
        PyErr_SetString(PyExc_ValueError, "a buffer lies outside the blob");
        goto done;
    }
    result = Py_BuildValue("(y#y#y#y#)", offsets, (Py_ssize_t)n * 8, sizes, (Py_ssize_t)n * 8, positions,
                           (Py_ssize_t)n * 8, stops, count * 8);
done:
    PyMem_RawFree(offsets);
    PyMem_RawFree(sizes);
    PyMem_RawFree(positions);
    PyMem_RawFree(stops);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&bases);
    PyBuffer_Release(&ends);
    return result;
}


/* ---------------------------------------------------------------------------------------------
 * The index pass's header columns: one row of the index's record dtype per framed record, as
 * index_build._framed_rows gathers them with numpy. WPP rows get only what every row gets
 * (their optional items are read in Python, as there).
 */
enum { C_TIMESTAMP, C_KEYWORD, C_PID, C_TID, C_CPU, C_BUFFER, C_OFFSET, C_SIZE, C_UDO, C_UDL, C_ID, C_VERSION, C_TASK,
       C_HOOK, C_FLAGS, C_KIND, C_HEADER_TYPE, C_LEVEL, C_OPCODE, C_CHANNEL, C_COUNT };
enum { KIND_SYSTEM, KIND_COMPACT, KIND_PERFINFO, KIND_CLASSIC, KIND_INSTANCE, KIND_EVENT };

static inline void put8(uint8_t *row, const int64_t *at, int c, uint64_t v) { memcpy(row + at[c], &v, 8); }
static inline void put4(uint8_t *row, const int64_t *at, int c, uint32_t v) { memcpy(row + at[c], &v, 4); }
static inline void put2(uint8_t *row, const int64_t *at, int c, uint16_t v) { memcpy(row + at[c], &v, 2); }
static inline void put1(uint8_t *row, const int64_t *at, int c, uint8_t v) { row[at[c]] = v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static PyObject *py_rows(PyObject *self, PyObject *args) {
    Py_buffer v[16];
    int got = 0;
    PyObject *result = NULL;
    memset(v, 0, sizeof v);
    Py_ssize_t row_size;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*w*nw*w*w*:rows", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
                          &v[8], &v[9], &v[10], &v[11], &row_size, &v[12], &v[13], &v[14]))
        return NULL;
    got = 15;
    const uint8_t *blob = v[0].buf;
    const int64_t *offsets = v[1].buf, *sizes = v[2].buf, *positions = v[3].buf, *bases = v[4].buf, *cpus = v[5].buf,
                  *indices = v[6].buf, *groups = v[7].buf, *aliases = v[8].buf, *extension = v[9].buf, *at = v[10].buf;
    uint8_t *out = v[11].buf, *has = v[14].buf;
    uint64_t *lo = v[12].buf, *hi = v[13].buf;
    Py_ssize_t n = v[1].len / 8, buffers = v[4].len / 8, alias_count = v[8].len / 24;
    if (v[2].len / 8 != n || v[3].len / 8 != n || v[5].len / 8 != buffers || v[6].len / 8 != buffers || v[7].len != 256 * 24 ||
        v[9].len != 256 * 8 || v[10].len != C_COUNT * 8 || row_size <= 0 || v[11].len != n * row_size || v[12].len != n * 8 ||
        v[13].len != n * 8 || v[14].len != n) {
        PyErr_SetString(PyExc_ValueError, "rows: arrays of the wrong sizes");
        goto done;
    }
    static const int width[C_COUNT] = {8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1};
    for (int c = 0; c < C_COUNT; c++)
        if (at[c] < 0 || at[c] + width[c] > row_size) {
            PyErr_SetString(PyExc_ValueError, "rows: a column lies outside the row");
            goto done;
        }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = offsets[i], size = sizes[i], b = positions[i];
        if (p < 0 || size < 8 || b < 0 || b >= buffers || p + size > (int64_t)v[0].len || p + OE_EVENT_HEADER_SIZE > (int64_t)v[0].len) {
            bad = 1;
            break;
        }
        const uint8_t *h = blob + p;
        uint8_t *row = out + i * row_size;
        uint32_t marker = rd32(h);
        unsigned type = (uint8_t)(marker >> OE_MARKER_TYPE_SHIFT), flags = marker >> OE_MARKER_FLAGS_SHIFT;
        int typed = (flags & OE_TYPED_FLAGS_MASK) == OE_TYPED_FLAGS_MASK;
        int kind = typed && typed_rows[type].fields ? typed_rows[type].kind : OE_MESSAGE_KIND;
        int64_t udo = typed_rows[type].fields ? typed_rows[type].header_size : OE_MESSAGE_HEADER_SIZE;
        if (kind == KIND_SYSTEM || kind == KIND_COMPACT || kind == KIND_PERFINFO) {
            int perfinfo = kind == KIND_PERFINFO;
            uint16_t version = rd16(h + (perfinfo ? OE_PERFINFO_VERSION_AT : OE_SYSTEM_VERSION_AT));
            uint16_t hook = rd16(h + (perfinfo ? OE_PERFINFO_HOOKID_AT : OE_SYSTEM_HOOKID_AT));
            put2(row, at, C_VERSION, version & 0xFF);
            put1(row, at, C_OPCODE, hook & 0xFF);
            put2(row, at, C_HOOK, hook);
            if (perfinfo) {
                put4(row, at, C_PID, 0xFFFFFFFFu);
                put4(row, at, C_TID, 0xFFFFFFFFu);
                put8(row, at, C_TIMESTAMP, rd64(h + OE_PERFINFO_SYSTEMTIME_AT));
            } else {
                put4(row, at, C_TID, rd32(h + OE_SYSTEM_THREADID_AT));
                put4(row, at, C_PID, rd32(h + OE_SYSTEM_PROCESSID_AT));
                put8(row, at, C_TIMESTAMP, rd64(h + OE_SYSTEM_SYSTEMTIME_AT));
            }
            udo += extension[version >> 8];
            int64_t group = hook >> 8;
            for (Py_ssize_t a = 0; a < alias_count; a++)
                if (group == aliases[3 * a] && (hook & 0xFF) == aliases[3 * a + 1]) group = aliases[3 * a + 2];
            group &= 0xFF;
            lo[i] = (uint64_t)groups[3 * group];
            hi[i] = (uint64_t)groups[3 * group + 1];
            has[i] = groups[3 * group + 2] != 0;
        } else if (kind == KIND_CLASSIC || kind == KIND_INSTANCE) {
            put1(row, at, C_OPCODE, h[OE_CLASSIC_TYPE_AT]);
            put1(row, at, C_LEVEL, h[OE_CLASSIC_LEVEL_AT]);
            put2(row, at, C_VERSION, rd16(h + OE_CLASSIC_VERSION_AT));
            put4(row, at, C_TID, rd32(h + OE_CLASSIC_THREADID_AT));
            put4(row, at, C_PID, rd32(h + OE_CLASSIC_PROCESSID_AT));
            put8(row, at, C_TIMESTAMP, rd64(h + OE_CLASSIC_TIMESTAMP_AT));
            lo[i] = rd64(h + OE_CLASSIC_GUID_AT);
            hi[i] = rd64(h + OE_CLASSIC_GUID_AT + sizeof(uint64_t));
            has[i] = 1;
        } else if (kind == KIND_EVENT) {
            uint16_t event_flags = rd16(h + OE_EVENT_FLAGS_AT);
            put2(row, at, C_FLAGS, event_flags);
            put4(row, at, C_TID, rd32(h + OE_EVENT_THREADID_AT));
            put4(row, at, C_PID, rd32(h + OE_EVENT_PROCESSID_AT));
            put8(row, at, C_TIMESTAMP, rd64(h + OE_EVENT_TIMESTAMP_AT));
            put2(row, at, C_ID, rd16(h + OE_EVENT_ID_AT));
            put2(row, at, C_VERSION, h[OE_EVENT_VERSION_AT]);
            put1(row, at, C_CHANNEL, h[OE_EVENT_CHANNEL_AT]);
            put1(row, at, C_LEVEL, h[OE_EVENT_LEVEL_AT]);
            put1(row, at, C_OPCODE, h[OE_EVENT_OPCODE_AT]);
            put2(row, at, C_TASK, rd16(h + OE_EVENT_TASK_AT));
            put8(row, at, C_KEYWORD, rd64(h + OE_EVENT_KEYWORD_AT));
            lo[i] = rd64(h + OE_EVENT_PROVIDERID_AT);
            hi[i] = rd64(h + OE_EVENT_PROVIDERID_AT + sizeof(uint64_t));
            has[i] = 1;
            if (event_flags & OE_EVENT_HEADER_FLAG_EXTENDED_INFO) {
                /* extended items before the user data: each says its size and whether another follows */
                int64_t pos = OE_EVENT_HEADER_SIZE;
                while (pos + OE_EXTENDED_ITEM_SIZE <= size) {
                    uint16_t item = rd16(h + pos + OE_EXTENDED_ITEM_SIZE_AT);
                    if (item < OE_EXTENDED_ITEM_SIZE) break;
                    pos += item;
                    if (!(h[pos - item + OE_EXTENDED_ITEM_LINKAGE_AT] & 1)) break;
                }
                udo = pos < size ? pos : size;
            }
        }
        put1(row, at, C_HEADER_TYPE, (uint8_t)type);
        put1(row, at, C_KIND, (uint8_t)kind);
        put4(row, at, C_SIZE, (uint32_t)size);
        put4(row, at, C_BUFFER, (uint32_t)indices[b]);
        put4(row, at, C_CPU, (uint32_t)cpus[b]);
        put4(row, at, C_OFFSET, (uint32_t)(p - bases[b]));
        put4(row, at, C_UDO, (uint32_t)udo);
        put4(row, at, C_UDL, (uint32_t)(size - udo));
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "rows: a record lies outside the blob or its buffers");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&v[k]);
    return result;
}


/* ---------------------------------------------------------------------------------------------
 * Field columns: columns(blob, starts, lengths, plan) decodes the payloads of one schema (payload i
 * is blob[starts[i] : starts[i] + lengths[i]]) into one column per property, as tdh/columns.py's
 * plan describes them (two bytes per property: the step and the width it reads). A payload the
 * plan cannot read as the compiled reader would (too short, a string that would start at its end,
 * text that is not plain ASCII or well-formed UTF-16) is marked in the mask and left to the Python
 * decoder; its slots in the columns hold zeros / empty strings.
 *
 * Fixed columns are bytes of n values of the output width; string columns are (offsets, data):
 * n + 1 int32 offsets into UTF-8 data, Arrow's layout.
 */
enum { COL_COPY = OE_COL_COPY, COL_WIDEN = OE_COL_WIDEN, COL_BOOL = OE_COL_BOOL, COL_BE16 = OE_COL_BE16, COL_GUID = OE_COL_GUID,
       COL_FILETIME = OE_COL_FILETIME, COL_UTF16Z = OE_COL_UTF16Z, COL_ANSIZ = OE_COL_ANSIZ, COL_COUNTED_UTF16 = OE_COL_COUNTED_UTF16 };
#define COL_FILETIME_TO_UNIX_MICROS OE_COL_FILETIME_TO_UNIX_MICROS

typedef struct {
    uint8_t *p;
    size_t len, cap;
} col_bytes;

static int col_room(col_bytes *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    uint8_t *p = PyMem_RawRealloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void col_put_utf8(uint8_t *out, size_t *n, uint32_t c) {
    if (c < 0x80) {
        out[(*n)++] = (uint8_t)c;
    } else if (c < 0x800) {
        out[(*n)++] = (uint8_t)(0xC0 | (c >> 6));
        out[(*n)++] = (uint8_t)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out[(*n)++] = (uint8_t)(0xE0 | (c >> 12));
        out[(*n)++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (uint8_t)(0x80 | (c & 0x3F));
    } else {
        out[(*n)++] = (uint8_t)(0xF0 | (c >> 18));
        out[(*n)++] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
        out[(*n)++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[(*n)++] = (uint8_t)(0x80 | (c & 0x3F));
    }
}

/* The surrogate c at unit *i of p (units long) joined with the low surrogate after it into *c, *i
 * moved onto that low one: 1, or 0 for a lone or reversed surrogate (not well-formed). */
static int col_surrogate_pair(const uint8_t *p, size_t units, size_t *i, uint32_t *c) {
    if (*c >= 0xDC00 || *i + 1 >= units) return 0;
    uint32_t low = rd16(p + 2 * (*i + 1));
    if (low < 0xDC00 || low > 0xDFFF) return 0;
    *c = 0x10000 + ((*c - 0xD800) << 10) + (low - 0xDC00);
    (*i)++;
    return 1;
}

/* UTF-16LE code units p[0..units) as UTF-8 appended to b: 1 done, 0 not well-formed (a lone
 * surrogate: the Python decoder's replacement decides), -1 out of memory. */
static int col_utf16(col_bytes *b, const uint8_t *p, size_t units) {
    if (col_room(b, units * 3) < 0) return -1;
    size_t n = b->len;
    for (size_t i = 0; i < units; i++) {
        uint32_t c = rd16(p + 2 * i);
        if (c >= 0xD800 && c <= 0xDFFF && !col_surrogate_pair(p, units, &i, &c)) return 0;
        col_put_utf8(b->p, &n, c);
    }
    b->len = n;
    return 1;
}

/* The UTF-16LE text at p (at most units code units) up to its NUL unit, as UTF-8 appended to b:
 * 2 a NUL ended it (*used: the bytes read, the NUL's included), 1 it ran to the last unit, 0 not
 * well-formed, -1 out of memory. One pass: plain ASCII units are copied as they are scanned. */
static int col_utf16z(col_bytes *b, const uint8_t *p, size_t units, size_t *used) {
    if (col_room(b, units * 3) < 0) return -1;
    uint8_t *out = b->p;
    size_t n = b->len;
    for (size_t i = 0; i < units; i++) {
        uint32_t c = rd16(p + 2 * i);
        if (c < 0x80) {
            if (c == 0) {
                b->len = n;
                *used = 2 * i + 2;
                return 2;
            }
            out[n++] = (uint8_t)c;
            continue;
        }
        if (c >= 0xD800 && c <= 0xDFFF && !col_surrogate_pair(p, units, &i, &c)) return 0;
        col_put_utf8(out, &n, c);
    }
    b->len = n;
    *used = 2 * units;
    return 1;
}

static const char col_hex[] = "0123456789abcdef";
#define COL_AHEAD 8

static PyObject *py_columns(PyObject *self, PyObject *args) {
    Py_buffer blob, starts_view, lengths_view, plan_view;
    if (!PyArg_ParseTuple(args, "y*y*y*y*:columns", &blob, &starts_view, &lengths_view, &plan_view)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = starts_view.len / 8, steps = plan_view.len / 2;
    col_bytes *fixed = NULL, *data = NULL, *offsets = NULL;
    uint8_t *bad = NULL;
    size_t *marks = NULL;
    const int64_t *starts = starts_view.buf, *lengths = lengths_view.buf;
    const uint8_t *plan = plan_view.buf, *base = blob.buf;
    if (lengths_view.len != starts_view.len || plan_view.len % 2) {
        PyErr_SetString(PyExc_ValueError, "columns: starts and lengths differ, or the plan is cut");
        goto done;
    }
    for (Py_ssize_t k = 0; k < steps; k++) {
        int op = plan[2 * k], width = plan[2 * k + 1];
        int ok = (op == COL_COPY && (width == 1 || width == 2 || width == 4 || width == 8)) || (op == COL_WIDEN && width == 4) ||
                 (op == COL_BOOL && (width == 1 || width == 2 || width == 4 || width == 8)) || (op == COL_BE16 && width == 2) ||
                 (op == COL_GUID && width == 16) || (op == COL_FILETIME && width == 8) ||
                 ((op == COL_UTF16Z || op == COL_ANSIZ || op == COL_COUNTED_UTF16) && width == 0);
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "columns: step %zd of the plan (%d, %d) is not one this module reads", k, op, width);
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (starts[i] < 0 || lengths[i] < 0 || starts[i] + lengths[i] > (int64_t)blob.len) {
            PyErr_SetString(PyExc_ValueError, "columns: a payload lies outside the blob");
            goto done;
        }
    fixed = PyMem_RawCalloc(steps ? steps : 1, sizeof(col_bytes));
    data = PyMem_RawCalloc(steps ? steps : 1, sizeof(col_bytes));
    offsets = PyMem_RawCalloc(steps ? steps : 1, sizeof(col_bytes));
    bad = PyMem_RawCalloc(n ? n : 1, 1);
    marks = PyMem_RawCalloc(steps ? steps : 1, sizeof(size_t));
    if (!fixed || !data || !offsets || !bad || !marks) {
        PyErr_NoMemory();
        goto done;
    }
    int nomem = 0, too_big = 0;
    for (Py_ssize_t k = 0; k < steps && !nomem; k++) {
        int op = plan[2 * k], width = plan[2 * k + 1];
        size_t out = op == COL_COPY || op == COL_BE16 ? (size_t)width : op == COL_BOOL ? 1 : op == COL_WIDEN || op == COL_FILETIME ? 8 : 0;
        if (op == COL_GUID || op == COL_UTF16Z || op == COL_ANSIZ || op == COL_COUNTED_UTF16) {
            if (col_room(&offsets[k], ((size_t)n + 1) * 4) < 0) nomem = 1;
            else memset(offsets[k].p, 0, ((size_t)n + 1) * 4);
            offsets[k].len = ((size_t)n + 1) * 4;
        } else {
            if (col_room(&fixed[k], (size_t)n * out + 1) < 0) nomem = 1;
            else memset(fixed[k].p, 0, (size_t)n * out + 1);
            fixed[k].len = (size_t)n * out;
        }
    }
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !nomem && !too_big; i++) {
        const uint8_t *p = base + starts[i];
        size_t len = (size_t)lengths[i], pos = 0;
        int failed = 0;
#if defined(__GNUC__)
        /* payloads in time order are scattered over the buffers: ask for one a few ahead now */
        if (i + COL_AHEAD < n) __builtin_prefetch(base + starts[i + COL_AHEAD]);
#endif
        for (Py_ssize_t k = 0; k < steps; k++) marks[k] = data[k].len;
        for (Py_ssize_t k = 0; k < steps && !failed; k++) {
            int op = plan[2 * k], width = plan[2 * k + 1];
            if (op == COL_UTF16Z || op == COL_ANSIZ || op == COL_COUNTED_UTF16 || op == COL_GUID) {
                col_bytes *d = &data[k];
                if (op == COL_GUID) {
                    if (pos + 16 > len) { failed = 1; break; }
                    if (col_room(d, 36) < 0) { nomem = 1; break; }
                    const uint8_t *g = p + pos;
                    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
                    uint8_t *o = d->p + d->len;
                    for (int j = 0, w = 0; j < 16; j++) {
                        if (j == 4 || j == 6 || j == 8 || j == 10) o[w++] = '-';
                        o[w++] = (uint8_t)col_hex[g[order[j]] >> 4];
                        o[w++] = (uint8_t)col_hex[g[order[j]] & 15];
                    }
                    d->len += 36;
                    pos += 16;
                } else if (op == COL_UTF16Z) {
                    /* up to the NUL unit (or the payload's last whole unit), converted as it is found */
                    if (pos >= len) { failed = 1; break; }
                    size_t used = 0;
                    int r = col_utf16z(d, p + pos, (len - pos) / 2, &used);
                    if (r < 0) { nomem = 1; break; }
                    if (r == 0) { failed = 1; break; }
                    pos = r == 2 ? pos + used : len;
                } else if (op == COL_COUNTED_UTF16) {
                    if (pos + 2 > len) { failed = 1; break; }
                    size_t bytes = rd16(p + pos), start = pos + 2;
                    if (start + bytes > len || (bytes & 1)) { failed = 1; break; }
                    int r = col_utf16(d, p + start, bytes / 2);
                    if (r < 0) { nomem = 1; break; }
                    if (r == 0) { failed = 1; break; }
                    pos = start + bytes;
                } else {
                    const uint8_t *nul = pos < len ? memchr(p + pos, 0, len - pos) : NULL;
                    size_t end, next;
                    if (nul != NULL) {
                        end = (size_t)(nul - p);
                        next = end + 1;
                    } else if (pos < len) {
                        end = len;
                        next = len;
                    } else {
                        failed = 1;
                        break;
                    }
                    for (size_t j = pos; j < end; j++)
                        if (p[j] & 0x80) { failed = 1; break; }
                    if (failed) break;
                    if (col_room(d, end - pos) < 0) { nomem = 1; break; }
                    memcpy(d->p + d->len, p + pos, end - pos);
                    d->len += end - pos;
                    pos = next;
                }
                if (d->len > 0x7FFFFFFF) { too_big = 1; break; }
                continue;
            }
            if (pos + (size_t)width > len) { failed = 1; break; }
            const uint8_t *v = p + pos;
            uint8_t *o = fixed[k].p;
            switch (op) {
            case COL_COPY: memcpy(o + (size_t)i * width, v, width); break;
            case COL_WIDEN: { uint64_t x = rd32(v); memcpy(o + (size_t)i * 8, &x, 8); break; }
            case COL_BOOL: {
                uint8_t any = 0;
                for (int j = 0; j < width; j++) any |= v[j];
                o[i] = any != 0;
                break;
            }
            case COL_BE16: { uint16_t x = (uint16_t)(v[0] << 8 | v[1]); memcpy(o + (size_t)i * 2, &x, 2); break; }
            case COL_FILETIME: {
                int64_t ticks = (int64_t)rd64(v);
                int64_t q = ticks / 10;
                if (ticks % 10 < 0) q -= 1; /* floor, as Python's // */
                q -= COL_FILETIME_TO_UNIX_MICROS;
                memcpy(o + (size_t)i * 8, &q, 8);
                break;
            }
            }
            pos += (size_t)width;
        }
        if (failed) {
            bad[i] = 1;
            /* undo this payload's text: its strings are empty, the Python decoder's values replace them */
            for (Py_ssize_t k = 0; k < steps; k++) data[k].len = marks[k];
            for (Py_ssize_t k = 0; k < steps; k++) {
                int op = plan[2 * k], width = plan[2 * k + 1];
                if (op == COL_COPY || op == COL_BE16) memset(fixed[k].p + (size_t)i * width, 0, width);
                else if (op == COL_WIDEN || op == COL_FILETIME) memset(fixed[k].p + (size_t)i * 8, 0, 8);
                else if (op == COL_BOOL) fixed[k].p[i] = 0;
            }
        }
        for (Py_ssize_t k = 0; k < steps; k++)
            if (offsets[k].p != NULL) {
                int32_t at = (int32_t)data[k].len;
                memcpy(offsets[k].p + ((size_t)i + 1) * 4, &at, 4);
            }
    }
    Py_END_ALLOW_THREADS
    if (nomem) {
        PyErr_NoMemory();
        goto done;
    }
    if (too_big) {
        PyErr_SetString(PyExc_ValueError, "columns: a text column passes 2 GiB; give fewer payloads at a time");
        goto done;
    }
    PyObject *list = PyList_New(steps);
    if (list == NULL) goto done;
    for (Py_ssize_t k = 0; k < steps; k++) {
        PyObject *item;
        if (offsets[k].p != NULL)
            item = Py_BuildValue("(y#y#)", (const char *)offsets[k].p, (Py_ssize_t)offsets[k].len,
                                 data[k].p ? (const char *)data[k].p : "", (Py_ssize_t)data[k].len);
        else
            item = PyBytes_FromStringAndSize((const char *)fixed[k].p, (Py_ssize_t)fixed[k].len);
        if (item == NULL) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, k, item);
    }
    result = Py_BuildValue("(Ny#)", list, (const char *)bad, n);
done:
    for (Py_ssize_t k = 0; k < steps; k++) {
        if (fixed) PyMem_RawFree(fixed[k].p);
        if (data) PyMem_RawFree(data[k].p);
        if (offsets) PyMem_RawFree(offsets[k].p);
    }
    PyMem_RawFree(fixed);
    PyMem_RawFree(data);
    PyMem_RawFree(offsets);
    PyMem_RawFree(bad);
    PyMem_RawFree(marks);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts_view);
    PyBuffer_Release(&lengths_view);
    PyBuffer_Release(&plan_view);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * Header fields: field(index, doc) is the descriptor etl/record.py's _tuple_field makes, read
 * in C (record._h[index]; on a configured record class straight from the slot).
 */
typedef struct {
    PyObject_HEAD
    Py_ssize_t index;
    PyObject *doc;
} FieldObject;

static PyObject *str_h;

static PyObject *field_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    Py_ssize_t index = ((FieldObject *)self)->index;
    if (record_base != NULL && PyObject_TypeCheck(obj, record_base)) {
        PyObject *h = *(PyObject **)((char *)obj + slot_offsets[SLOT_H]);
        if (h != NULL && PyTuple_CheckExact(h) && index < PyTuple_GET_SIZE(h)) return Py_NewRef(PyTuple_GET_ITEM(h, index));
    }
    PyObject *h = PyObject_GetAttr(obj, str_h);
    if (h == NULL) return NULL;
    PyObject *value = PySequence_GetItem(h, index);
    Py_DECREF(h);
    return value;
}

static int field_set(PyObject *self, PyObject *obj, PyObject *value) {
    PyErr_Format(PyExc_AttributeError, "header field of '%s' object has no setter", Py_TYPE(obj)->tp_name);
    return -1;
}

static void field_dealloc(PyObject *self) {
    Py_XDECREF(((FieldObject *)self)->doc);
    Py_TYPE(self)->tp_free(self);
}

static PyMemberDef field_members[] = {
    {"index", T_PYSSIZET, offsetof(FieldObject, index), READONLY, "where the field sits in the header tuple"},
    {"__doc__", T_OBJECT, offsetof(FieldObject, doc), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FieldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._read.HeaderField",
    .tp_basicsize = sizeof(FieldObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A record's header field: record._h[index], read-only.",
    .tp_dealloc = field_dealloc,
    .tp_members = field_members,
    .tp_descr_get = field_get,
    .tp_descr_set = field_set,
};

static PyObject *py_field(PyObject *self, PyObject *args) {
    Py_ssize_t index;
    PyObject *doc = Py_None;
    if (!PyArg_ParseTuple(args, "n|O:field", &index, &doc)) return NULL;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "field: index must not be negative");
        return NULL;
    }
    FieldObject *f = PyObject_New(FieldObject, &FieldType);
    if (f == NULL) return NULL;
    f->index = index;
    f->doc = Py_NewRef(doc);
    return (PyObject *)f;
}

/* ---------------------------------------------------------------------------------------------
 * What this module was compiled with, for the test that holds it to the Python declarations.
 */
static int put_row(PyObject *rows, long type, PyObject *row) {
    PyObject *key = PyLong_FromLong(type);
    int rc = key && row ? PyDict_SetItem(rows, key, row) : -1;
    Py_XDECREF(key);
    Py_XDECREF(row);
    return rc;
}

static PyObject *py_constants(PyObject *self, PyObject *unused) {
    PyObject *rows = PyDict_New();
    if (rows == NULL) return NULL;
#define OE_ROW(type, kind, size, size_at, fields, structure) \
    if (put_row(rows, type, Py_BuildValue("(iiiss)", kind, size, size_at, fields, structure)) < 0) goto fail;
    OE_HEADER_KINDS(OE_ROW)
#undef OE_ROW
    PyObject *steps = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "copy", COL_COPY, "widen", COL_WIDEN, "bool", COL_BOOL,
                                    "be16", COL_BE16, "guid", COL_GUID, "filetime", COL_FILETIME, "utf16z", COL_UTF16Z, "ansiz",
                                    COL_ANSIZ, "counted_utf16", COL_COUNTED_UTF16);
    if (steps == NULL) goto fail;
    return Py_BuildValue(
        "{s:N,s:N,s:(iiiss),s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:i,s:i,s:i,s:i}", "column_steps", steps, "header_kinds", rows, "message",
        OE_MESSAGE_KIND, OE_MESSAGE_HEADER_SIZE, OE_MESSAGE_SIZE_AT, OE_MESSAGE_FIELDS, OE_MESSAGE_STRUCTURE,
        "records_start", OE_RECORDS_START, "typed_flags_mask", OE_TYPED_FLAGS_MASK, "message_flags_mask",
        OE_MESSAGE_FLAGS_MASK, "message_flags", OE_MESSAGE_FLAGS, "marker_flags_shift", OE_MARKER_FLAGS_SHIFT,
        "marker_key_shift", OE_MARKER_KEY_SHIFT, "end_of_data", (unsigned)OE_END_OF_DATA, "record_alignment",
        OE_RECORD_ALIGNMENT, "min_match", OE_LZ_MIN_MATCH, "max_distance", OE_LZ_MAX_DISTANCE, "smallest_length_field",
        OE_LZ_SMALLEST_LENGTH_FIELD);
fail:
    Py_DECREF(rows);
    return NULL;
}

static PyMethodDef methods[] = {
    {"inflate", (PyCFunction)(void (*)(void))py_inflate, METH_FASTCALL, "inflate(data, output_size) -> bytes"},
    {"configure", py_configure, METH_VARARGS, "configure(base, classes, message_class)"},
    {"walk", (PyCFunction)(void (*)(void))py_walk, METH_FASTCALL,
     "walk(data, pos, end, cpu, ctx, buffer_index, limit) -> (records, pos, stop, marker, size, header_type)"},
    {"chains", py_chains, METH_VARARGS, "chains(blob, bases, ends) -> (offsets, sizes, positions, stops)"},
    {"rows", py_rows, METH_VARARGS,
     "rows(blob, offsets, sizes, positions, bases, cpus, indices, groups, aliases, extension, column_at, out, row_size, lo, hi, has)"},
    {"field", py_field, METH_VARARGS, "field(index, doc) -> a read-only descriptor of record._h[index]"},
    {"columns", py_columns, METH_VARARGS, "columns(blob, starts, lengths, plan) -> (columns, bad): a schema's field columns"},
    {"constants", py_constants, METH_NOARGS, "what the module was compiled with"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "openetw._native._read",
                                    "The read side's compiled twin (see openetw._native).", -1, methods};

PyMODINIT_FUNC PyInit__read(void) {
    set_rows();
    for (int t = 0; t < 256; t++)
        if (typed_rows[t].fields) counts[t] = field_count(typed_rows[t].fields);
    message_count = field_count(OE_MESSAGE_FIELDS);
    PyObject *errors = PyImport_ImportModule("openetw.errors");
    if (errors == NULL) return NULL;
    CompressionError = PyObject_GetAttrString(errors, "CompressionError");
    InvalidArgument = PyObject_GetAttrString(errors, "InvalidArgument");
    Py_DECREF(errors);
    if (CompressionError == NULL || InvalidArgument == NULL) return NULL;
    str_h = PyUnicode_InternFromString("_h");
    if (str_h == NULL || PyType_Ready(&FieldType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "STOP_END", STOP_END) < 0 || PyModule_AddIntConstant(m, "STOP_UNKNOWN_TYPE", STOP_UNKNOWN_TYPE) < 0 ||
        PyModule_AddIntConstant(m, "STOP_NO_HEADER", STOP_NO_HEADER) < 0 || PyModule_AddIntConstant(m, "STOP_HEADER_PAST", STOP_HEADER_PAST) < 0 ||
        PyModule_AddIntConstant(m, "STOP_SIZE", STOP_SIZE) < 0 || PyModule_AddIntConstant(m, "STOP_MORE", STOP_MORE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
