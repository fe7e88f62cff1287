/* openetw._native._timeline: the compiled twin of the timeline encoders' hot loops.
 *
 *   perfetto_annotations(args, limit, prefixes, arg_prefix, new, other) -> bytes
 *       the TrackEvent.debug_annotations of an event's arguments, as the loop of
 *       export/timeline/perfetto.py's PerfettoWriter._track_event writes them: the first ``limit``
 *       items of the dict ``args``, each a DebugAnnotation {name_iid, value}. ``prefixes`` maps an
 *       argument name to its encoded name_iid; a name not in it is interned by
 *       ``arg_prefix(name, new)`` (which returns the prefix). An unsigned integer below 2**64 and
 *       a str of at most 4,096 characters that is valid UTF-8, and a list or tuple (its text) are encoded here; any other value
 *       is handed to ``other(name, value, new)``, the Python path, which returns the whole
 *       annotation (tag, length and all): the bytes are the pure writer's in every case.
 *
 *   perfetto_track_event(ts, state, head, args, limit, prefixes, arg_prefix, new, other, extra) -> bytes | None
 *       the whole framed packet of one track event on a sequence whose state is set, as
 *       PerfettoWriter._track_event and _track_packet write it: Trace.packet {timestamp ``ts``,
 *       ``state`` (the sequence id and flags, encoded), track_event {``head``, the annotations of
 *       ``args`` (None or a dict) as perfetto_annotations writes them, ``extra``}, interned_data
 *       (the entries of ``new``, names the head and the arguments interned) when there are any}.
 *       None, with nothing interned, when ``ts`` does not fit in 64 bits (the Python path takes it).
 *
 *   chrome_args(args) -> str | None
 *       the JSON text of ``chrome._args(args)`` as the writer's compact encoder gives it
 *       (``ensure_ascii=False``, ``separators=(",", ":")``), or None when a key or value is one
 *       it leaves to the Python encoder (a key that is not a str, an integer beyond 2**53, a
 *       text longer than 4,096 characters or not valid UTF-8, a float that is not finite, a
 *       dict, a memoryview, any other type, or a list or tuple holding one).
 *
 *   constants() -> dict
 *       what this module was compiled with (a test compares it with the Python).
 *
 * The Python code is the reference (tests compare the two on generated values and on exported
 * corpus traces). Nothing here reads a record; the tags and bounds come from
 * _timeline_constants.h, generated from the writers (python -m openetw._native.gen).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_timeline_constants.h"

#define VARINT_MORE 0x80     /* a varint byte with more to come */
#define VARINT_BITS 0x7F

typedef struct {
    char *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} Out;

static int out_reserve(Out *out, Py_ssize_t more) {
    if (out->size + more <= out->cap) return 0;
    Py_ssize_t cap = out->cap ? out->cap : 256;
    while (cap < out->size + more) cap *= 2;
    char *grown = PyMem_Realloc(out->data, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = grown;
    out->cap = cap;
    return 0;
}

static int out_put(Out *out, const void *data, Py_ssize_t size) {
    if (out_reserve(out, size) < 0) return -1;
    memcpy(out->data + out->size, data, (size_t)size);
    out->size += size;
    return 0;
}

static int out_byte(Out *out, unsigned char byte) {
    if (out_reserve(out, 1) < 0) return -1;
    out->data[out->size++] = (char)byte;
    return 0;
}

static Py_ssize_t varint_into(unsigned char *at, uint64_t value) {
    Py_ssize_t n = 0;
    while (value >= VARINT_MORE) {
        at[n++] = (unsigned char)((value & VARINT_BITS) | VARINT_MORE);
        value >>= 7;
    }
    at[n++] = (unsigned char)value;
    return n;
}

static int out_varint(Out *out, uint64_t value) {
    unsigned char tmp[10];
    return out_put(out, tmp, varint_into(tmp, value));
}

/* -- Perfetto ------------------------------------------------------------------------------ */

/* The annotations of ``args`` appended to ``out`` (0), or -1 with an exception set. */
static int annotations_into(Out *out_, PyObject *args, PyObject *limit_object, PyObject *prefixes, PyObject *arg_prefix,
                            PyObject *new_list, PyObject *other) {
    if (!PyDict_Check(args) || !PyDict_Check(prefixes)) {
        PyErr_SetString(PyExc_TypeError, "perfetto annotations: args and prefixes must be dicts");
        return -1;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(limit_object);
    if (limit == -1 && PyErr_Occurred()) return -1;
    Out out = *out_;
    Py_ssize_t pos = 0, done = 0;
    PyObject *key, *value;
    while (done < limit && PyDict_Next(args, &pos, &key, &value)) {
        done++;
        Py_INCREF(key);
        Py_INCREF(value);
        PyObject *whole = NULL;  /* the annotation from the Python path */
        PyObject *listed = NULL;  /* the text of a list or tuple */
        const char *text = NULL;
        Py_ssize_t text_size = 0;
        uint64_t number = 0;
        int kind = 0;  /* 1: unsigned integer, 2: text, 0: the Python path */
        if (PyLong_CheckExact(value)) {
            int overflow = 0;
            long long small = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (small == -1 && PyErr_Occurred()) goto fail;
            if (!overflow && small >= 0) {
                number = (uint64_t)small;
                kind = 1;
            } else if (overflow > 0) {
                unsigned long long big = PyLong_AsUnsignedLongLong(value);
                if (big == (unsigned long long)-1 && PyErr_Occurred()) {
                    PyErr_Clear();
                } else {
                    number = big;
                    kind = 1;
                }
            }
        } else if (PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) <= OE_PERFETTO_MAX_TEXT) {
            text = PyUnicode_AsUTF8AndSize(value, &text_size);
            if (text == NULL) {
                PyErr_Clear();  /* a lone surrogate: the Python path replaces it */
            } else {
                kind = 2;
            }
        } else if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
            /* str(value)[:4096], as the Python path writes a sequence (never remembered: unhashable) */
            listed = PyObject_Str(value);
            if (listed == NULL) goto fail;
            if (PyUnicode_GET_LENGTH(listed) > OE_PERFETTO_MAX_TEXT) {
                PyObject *cut = PyUnicode_Substring(listed, 0, OE_PERFETTO_MAX_TEXT);
                Py_DECREF(listed);
                listed = cut;
                if (listed == NULL) goto fail;
            }
            text = PyUnicode_AsUTF8AndSize(listed, &text_size);
            if (text == NULL) {
                PyErr_Clear();
                Py_CLEAR(listed);
            } else {
                kind = 2;
            }
        }
        if (kind == 0) {
            whole = PyObject_CallFunctionObjArgs(other, key, value, new_list, NULL);
            if (whole == NULL) goto fail;
            if (!PyBytes_Check(whole)) {
                PyErr_SetString(PyExc_TypeError, "perfetto_annotations: other() must return bytes");
                Py_DECREF(whole);
                goto fail;
            }
            int bad = out_put(&out, PyBytes_AS_STRING(whole), PyBytes_GET_SIZE(whole));
            Py_DECREF(whole);
            if (bad < 0) goto fail;
        } else {
            PyObject *prefix = PyDict_GetItemWithError(prefixes, key);
            if (prefix != NULL) {
                Py_INCREF(prefix);
            } else {
                if (PyErr_Occurred()) goto fail;
                prefix = PyObject_CallFunctionObjArgs(arg_prefix, key, new_list, NULL);
                if (prefix == NULL) goto fail;
            }
            if (!PyBytes_Check(prefix)) {
                PyErr_SetString(PyExc_TypeError, "perfetto_annotations: a prefix must be bytes");
                Py_DECREF(prefix);
                goto fail;
            }
            unsigned char head[24];
            Py_ssize_t head_size = 0;
            Py_ssize_t prefix_size = PyBytes_GET_SIZE(prefix);
            Py_ssize_t inner;
            if (kind == 1) {
                head[0] = OE_UINT_TAG;
                head_size = 1 + varint_into(head + 1, number);
                inner = prefix_size + head_size;
            } else {
                head[0] = OE_STRING_TAG;
                head_size = 1 + varint_into(head + 1, (uint64_t)text_size);
                inner = prefix_size + head_size + text_size;
            }
            int bad = out_byte(&out, OE_ANNOTATION_TAG) < 0 || out_varint(&out, (uint64_t)inner) < 0 ||
                      out_put(&out, PyBytes_AS_STRING(prefix), prefix_size) < 0 || out_put(&out, head, head_size) < 0 ||
                      (kind == 2 && out_put(&out, text, text_size) < 0);
            Py_DECREF(prefix);
            Py_CLEAR(listed);
            if (bad) goto fail;
        }
        Py_DECREF(key);
        Py_DECREF(value);
        continue;
    fail:
        Py_XDECREF(listed);
        Py_DECREF(key);
        Py_DECREF(value);
        *out_ = out;
        return -1;
    }
    *out_ = out;
    return 0;
}

static PyObject *perfetto_annotations(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)self;
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "perfetto_annotations takes 6 arguments");
        return NULL;
    }
    Out out = {NULL, 0, 0};
    if (annotations_into(&out, argv[0], argv[1], argv[2], argv[3], argv[4], argv[5]) < 0) {
        PyMem_Free(out.data);
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(out.data, out.size);
    PyMem_Free(out.data);
    return result;
}

static int put_bytes(Out *out, PyObject *data) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "perfetto_track_event: bytes expected");
        return -1;
    }
    return out_put(out, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
}

static PyObject *perfetto_track_event(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)self;
    if (argc != 10) {
        PyErr_SetString(PyExc_TypeError, "perfetto_track_event takes 10 arguments");
        return NULL;
    }
    PyObject *state = argv[1], *head = argv[2], *args = argv[3], *new_list = argv[7], *extra = argv[9];
    int overflow = 0;
    long long ts = PyLong_AsLongLongAndOverflow(argv[0], &overflow);
    if (ts == -1 && PyErr_Occurred()) return NULL;
    if (overflow) Py_RETURN_NONE;  /* beyond 64 bits: the Python path, before anything is interned */
    if (!PyList_Check(new_list)) {
        PyErr_SetString(PyExc_TypeError, "perfetto_track_event: new must be a list");
        return NULL;
    }
    Out event = {NULL, 0, 0}, packet = {NULL, 0, 0}, framed = {NULL, 0, 0};
    PyObject *result = NULL;
    if (put_bytes(&event, head) < 0) goto done;
    if (args != Py_None && PyDict_GET_SIZE(args) > 0 &&
        annotations_into(&event, args, argv[4], argv[5], argv[6], new_list, argv[8]) < 0)
        goto done;
    if (put_bytes(&event, extra) < 0) goto done;
    if (out_byte(&packet, OE_TIMESTAMP_TAG) < 0 || out_varint(&packet, (uint64_t)ts) < 0 || put_bytes(&packet, state) < 0 ||
        out_byte(&packet, OE_TRACK_EVENT_TAG) < 0 || out_varint(&packet, (uint64_t)event.size) < 0 ||
        out_put(&packet, event.data, event.size) < 0)
        goto done;
    Py_ssize_t count = PyList_GET_SIZE(new_list);
    if (count) {
        Py_ssize_t interned = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item = PyList_GET_ITEM(new_list, i);
            if (!PyBytes_Check(item)) {
                PyErr_SetString(PyExc_TypeError, "perfetto_track_event: interned entries must be bytes");
                goto done;
            }
            interned += PyBytes_GET_SIZE(item);
        }
        if (out_byte(&packet, OE_INTERNED_TAG) < 0 || out_varint(&packet, (uint64_t)interned) < 0) goto done;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (put_bytes(&packet, PyList_GET_ITEM(new_list, i)) < 0) goto done;
        }
    }
    if (out_byte(&framed, OE_PACKET_TAG) < 0 || out_varint(&framed, (uint64_t)packet.size) < 0) goto done;
    result = PyBytes_FromStringAndSize(NULL, framed.size + packet.size);
    if (result == NULL) goto done;
    memcpy(PyBytes_AS_STRING(result), framed.data, (size_t)framed.size);
    memcpy(PyBytes_AS_STRING(result) + framed.size, packet.data, (size_t)packet.size);
done:
    PyMem_Free(event.data);
    PyMem_Free(packet.data);
    PyMem_Free(framed.data);
    return result;
}


/* -- Chrome JSON --------------------------------------------------------------------------- */

static const char HEX[] = "0123456789abcdef";

/* A JSON string of UTF-8 ``text`` as json's encode_basestring writes it (non-ASCII kept). */
static int json_text(Out *out, const char *text, Py_ssize_t size) {
    if (out_reserve(out, size + 2) < 0 || out_byte(out, '"') < 0) return -1;
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = (unsigned char)text[i];
        const char *escape = NULL;
        char unicode[7];
        switch (c) {
            case '"': escape = "\\\""; break;
            case '\\': escape = "\\\\"; break;
            case '\n': escape = "\\n"; break;
            case '\r': escape = "\\r"; break;
            case '\t': escape = "\\t"; break;
            case '\b': escape = "\\b"; break;
            case '\f': escape = "\\f"; break;
            default:
                if (c < ' ') {
                    unicode[0] = '\\';
                    unicode[1] = 'u';
                    unicode[2] = '0';
                    unicode[3] = '0';
                    unicode[4] = HEX[c >> 4];
                    unicode[5] = HEX[c & 15];
                    unicode[6] = 0;
                    escape = unicode;
                }
        }
        if (escape == NULL) continue;
        if (out_put(out, text + run, i - run) < 0 || out_put(out, escape, (Py_ssize_t)strlen(escape)) < 0) return -1;
        run = i + 1;
    }
    if (out_put(out, text + run, size - run) < 0) return -1;
    return out_byte(out, '"');
}

/* 1: written; 0: a value left to the Python encoder; -1: an error. */
static int json_value(Out *out, PyObject *value) {
    if (value == Py_None) return out_put(out, "null", 4) < 0 ? -1 : 1;
    if (value == Py_True) return out_put(out, "true", 4) < 0 ? -1 : 1;
    if (value == Py_False) return out_put(out, "false", 5) < 0 ? -1 : 1;
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) return -1;
        const long long bound = (long long)1 << 53;
        if (overflow || number < -bound || number > bound) return 0;
        char digits[32];
        int size = snprintf(digits, sizeof digits, "%lld", number);
        return out_put(out, digits, size) < 0 ? -1 : 1;
    }
    if (PyUnicode_CheckExact(value)) {
        if (PyUnicode_GET_LENGTH(value) > OE_CHROME_MAX_TEXT) return 0;
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(value, &size);
        if (text == NULL) {
            PyErr_Clear();
            return 0;
        }
        return json_text(out, text, size) < 0 ? -1 : 1;
    }
    if (PyFloat_CheckExact(value)) {
        double number = PyFloat_AS_DOUBLE(value);
        if (!isfinite(number)) return 0;
        char *text = PyOS_double_to_string(number, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) return -1;
        int bad = out_put(out, text, (Py_ssize_t)strlen(text));
        PyMem_Free(text);
        return bad < 0 ? -1 : 1;
    }
    if (PyBytes_CheckExact(value) || PyByteArray_CheckExact(value)) {
        const unsigned char *data = (const unsigned char *)(PyBytes_CheckExact(value) ? PyBytes_AS_STRING(value)
                                                                                      : PyByteArray_AS_STRING(value));
        Py_ssize_t size = PyBytes_CheckExact(value) ? PyBytes_GET_SIZE(value) : PyByteArray_GET_SIZE(value);
        if (size > OE_CHROME_MAX_TEXT / 2) size = OE_CHROME_MAX_TEXT / 2;
        if (out_reserve(out, 2 * size + 2) < 0) return -1;
        out->data[out->size++] = '"';
        for (Py_ssize_t i = 0; i < size; i++) {
            out->data[out->size++] = HEX[data[i] >> 4];
            out->data[out->size++] = HEX[data[i] & 15];
        }
        out->data[out->size++] = '"';
        return 1;
    }
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {  /* its first 256 items */
        Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
        if (size > OE_CHROME_MAX_ITEMS) size = OE_CHROME_MAX_ITEMS;
        if (out_byte(out, '[') < 0) return -1;
        for (Py_ssize_t i = 0; i < size; i++) {
            if (i && out_byte(out, ',') < 0) return -1;
            PyObject *item = PySequence_Fast_GET_ITEM(value, i);
            Py_INCREF(item);
            int status = json_value(out, item);
            Py_DECREF(item);
            if (status != 1) return status;
        }
        return out_byte(out, ']') < 0 ? -1 : 1;
    }
    return 0;
}

static PyObject *chrome_args(PyObject *self, PyObject *args) {
    (void)self;
    if (!PyDict_Check(args)) Py_RETURN_NONE;
    Out out = {NULL, 0, 0};
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int first = 1, status = 1;
    if (out_byte(&out, '{') < 0) return NULL;
    while (PyDict_Next(args, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) {
            status = 0;
            break;
        }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(key, &size);
        if (text == NULL) {
            PyErr_Clear();
            status = 0;
            break;
        }
        Py_INCREF(value);
        if ((!first && out_byte(&out, ',') < 0) || json_text(&out, text, size) < 0 || out_byte(&out, ':') < 0) {
            status = -1;
        } else {
            status = json_value(&out, value);
        }
        Py_DECREF(value);
        if (status != 1) break;
        first = 0;
    }
    if (status == 1 && out_byte(&out, '}') < 0) status = -1;
    PyObject *result = NULL;
    if (status == 1) {
        result = PyUnicode_DecodeUTF8(out.data, out.size, "strict");
    } else if (status == 0) {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(out.data);
    return result;
}

static PyObject *constants(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}", "packet_tag", OE_PACKET_TAG, "timestamp_tag", OE_TIMESTAMP_TAG,
        "track_event_tag", OE_TRACK_EVENT_TAG, "interned_tag", OE_INTERNED_TAG, "annotation_tag", OE_ANNOTATION_TAG,
        "uint_tag", OE_UINT_TAG, "string_tag", OE_STRING_TAG, "perfetto_max_text", OE_PERFETTO_MAX_TEXT,
        "chrome_max_text", OE_CHROME_MAX_TEXT, "chrome_max_items", OE_CHROME_MAX_ITEMS);
}

static PyMethodDef methods[] = {
    {"constants", constants, METH_NOARGS, "What this module was compiled with."},
    {"perfetto_annotations", (PyCFunction)(void (*)(void))perfetto_annotations, METH_FASTCALL,
     "The TrackEvent.debug_annotations of a dict of arguments (see the module doc)."},
    {"perfetto_track_event", (PyCFunction)(void (*)(void))perfetto_track_event, METH_FASTCALL,
     "A whole TracePacket of a TrackEvent on the track sequence, framed (see the module doc)."},
    {"chrome_args", chrome_args, METH_O, "The JSON text of a Chrome event's args, or None (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "openetw._native._timeline",
    "The compiled twin of the timeline encoders' hot loops (export/timeline/perfetto.py, chrome.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__timeline(void) { return PyModule_Create(&module); }
