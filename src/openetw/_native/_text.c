/* openetw._native._text: rows of text from columns, compiled.
 *
 * The twin of ``openetw.export.row_text`` (the pure code stays the reference): ``rows(n, pieces,
 * end, offsets)`` writes ``n`` rows, each the concatenation of its pieces followed by ``end``.
 * A piece is ``(kind, prefix, suffix, a, b, c, valid, null_text)``; row ``i`` of a piece writes
 * ``prefix``, its value and ``suffix``, or ``null_text`` instead when ``valid`` (uint8, one per
 * row, or None) is 0 there (nothing when ``null_text`` is None). Kinds:
 *
 *   0 constant      prefix only
 *   1 int64         a: int64 values, written in decimal
 *   2 uint64        a: uint64 values, in decimal
 *   3 text          a, b: int64 start and end of each row's bytes in c
 *   4 code          a: int64 codes into a table whose entry k is c[b[k]:b[k+1]] (b: int64 offsets)
 *   5 filetime      a: int64 FILETIMEs as ISO 8601 UTC with 7 fractional digits, as Python's
 *                   strftime writes them on glibc (years before 1000 unpadded)
 *                   (``2020-09-14T22:49:57.2118091Z``), ``FILETIME(<n>)`` outside the years 1-9999
 *
 * Every index is checked against the buffer it reads (a bad one raises ValueError). Returns the
 * rows as one bytes object, or (when ``offsets`` is true) that and the rows' start offsets as
 * n + 1 int64 in a bytes object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_CONST, K_INT, K_UINT, K_TEXT, K_CODE, K_FILETIME, K_COUNT };

typedef struct {
    int kind;
    const char *prefix, *suffix, *null_text;
    Py_ssize_t prefix_len, suffix_len, null_len;
    const int64_t *a, *b;
    Py_ssize_t a_len, b_len;
    const char *c;
    Py_ssize_t c_len;
    const uint8_t *valid;
    Py_buffer views[4];
    int nviews;
} Piece;

typedef struct {
    PyObject *bytes; /* the result, written in place and cut to its length at the end (no copy) */
    char *p;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *out, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX - out->len) {
        PyErr_NoMemory();
        return -1;
    }
    if (out->len + more <= out->cap)
        return 0;
    Py_ssize_t cap = out->cap ? out->cap : 1 << 16;
    while (cap < out->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            cap = out->len + more;
            break;
        }
        cap *= 2;
    }
    if (out->bytes == NULL) {
        out->bytes = PyBytes_FromStringAndSize(NULL, cap);
        if (out->bytes == NULL)
            return -1;
    } else if (_PyBytes_Resize(&out->bytes, cap) < 0) {
        return -1; /* (the object is freed and NULL) */
    }
    out->p = PyBytes_AS_STRING(out->bytes);
    out->cap = cap;
    return 0;
}

static inline int out_put(Out *out, const char *data, Py_ssize_t len) {
    if (len <= 0)
        return 0;
    if (out->len + len > out->cap && out_reserve(out, len) < 0)
        return -1;
    char *at = out->p + out->len;
    if (len <= 16) /* most pieces are a few bytes: no call */
        for (Py_ssize_t k = 0; k < len; k++)
            at[k] = data[k];
    else
        memcpy(at, data, (size_t)len);
    out->len += len;
    return 0;
}

/* ``value`` as ``width`` decimal digits (zero-padded) at ``at``. */
static inline void put_digits(char *at, unsigned value, int width) {
    for (int k = width - 1; k >= 0; k--) {
        at[k] = (char)('0' + value % 10);
        value /= 10;
    }
}

static const char two_digits[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int out_u64(Out *out, uint64_t value, int negative) {
    char digits[24];
    int at = 24;
    while (value >= 100) {
        unsigned pair = (unsigned)(value % 100);
        value /= 100;
        digits[--at] = two_digits[2 * pair + 1];
        digits[--at] = two_digits[2 * pair];
    }
    if (value >= 10) {
        digits[--at] = two_digits[2 * value + 1];
        digits[--at] = two_digits[2 * value];
    } else {
        digits[--at] = (char)('0' + value);
    }
    if (negative)
        digits[--at] = '-';
    return out_put(out, digits + at, 24 - at);
}

static int out_i64(Out *out, int64_t value) {
    if (value < 0)
        return out_u64(out, (uint64_t)0 - (uint64_t)value, 1);
    return out_u64(out, (uint64_t)value, 0);
}

/* Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's civil_from_days). */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t year = (int64_t)yoe + era * 400;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = year + (*m <= 2);
}

#define FILETIME_UNIX_SECONDS INT64_C(11644473600) /* 1601-01-01 to 1970-01-01 */

static int out_filetime(Out *out, int64_t ticks) {
    int64_t seconds = ticks / 10000000, rest = ticks % 10000000;
    if (rest < 0) { /* floor division, as Python's divmod */
        seconds -= 1;
        rest += 10000000;
    }
    int64_t unix_seconds = seconds - FILETIME_UNIX_SECONDS;
    int64_t days = unix_seconds >= 0 ? unix_seconds / 86400 : -((-unix_seconds + 86399) / 86400);
    int64_t in_day = unix_seconds - days * 86400;
    int64_t year;
    unsigned month, day;
    civil_from_days(days, &year, &month, &day);
    if (year >= 1 && year <= 9999) {
        if (year < 1000) { /* before 1000 only from a negative FILETIME: the year unpadded, as glibc's %Y */
            if (out_u64(out, (uint64_t)year, 0) < 0)
                return -1;
            char tail[24] = "-00-00T00:00:00.0000000Z";
            put_digits(tail + 1, month, 2);
            put_digits(tail + 4, day, 2);
            put_digits(tail + 7, (unsigned)(in_day / 3600), 2);
            put_digits(tail + 10, (unsigned)(in_day / 60 % 60), 2);
            put_digits(tail + 13, (unsigned)(in_day % 60), 2);
            put_digits(tail + 16, (unsigned)rest, 7);
            return out_put(out, tail, 24);
        }
        char text[28] = "0000-00-00T00:00:00.0000000Z";
        put_digits(text, (unsigned)year, 4);
        put_digits(text + 5, month, 2);
        put_digits(text + 8, day, 2);
        put_digits(text + 11, (unsigned)(in_day / 3600), 2);
        put_digits(text + 14, (unsigned)(in_day / 60 % 60), 2);
        put_digits(text + 17, (unsigned)(in_day % 60), 2);
        put_digits(text + 20, (unsigned)rest, 7);
        return out_put(out, text, 28);
    }
    if (out_put(out, "FILETIME(", 9) < 0 || out_i64(out, ticks) < 0)
        return -1;
    return out_put(out, ")", 1);
}

static void piece_release(Piece *piece) {
    for (int k = 0; k < piece->nviews; k++)
        PyBuffer_Release(&piece->views[k]);
    piece->nviews = 0;
}

/* A buffer of ``itemsize``-byte items (None: an empty one when ``optional``). */
static int piece_buffer(Piece *piece, PyObject *obj, Py_ssize_t itemsize, const void **data, Py_ssize_t *count, int optional, const char *what) {
    *data = NULL;
    *count = 0;
    if (obj == Py_None) {
        if (optional)
            return 0;
        PyErr_Format(PyExc_ValueError, "piece: %s is required", what);
        return -1;
    }
    Py_buffer *view = &piece->views[piece->nviews];
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    piece->nviews++;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "piece: %s is not a whole number of %zd-byte items", what, itemsize);
        return -1;
    }
    *data = view->buf;
    *count = view->len / itemsize;
    return 0;
}

static int piece_parse(PyObject *item, Piece *piece, Py_ssize_t n) {
    memset(piece, 0, sizeof *piece);
    PyObject *prefix, *suffix, *a, *b, *c, *valid, *null_text;
    if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "iSSOOOOO", &piece->kind, &prefix, &suffix, &a, &b, &c, &valid, &null_text)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "a piece is a tuple (kind, prefix, suffix, a, b, c, valid, null_text)");
        return -1;
    }
    if (piece->kind < 0 || piece->kind >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "piece: unknown kind %d", piece->kind);
        return -1;
    }
    piece->prefix = PyBytes_AS_STRING(prefix);
    piece->prefix_len = PyBytes_GET_SIZE(prefix);
    piece->suffix = PyBytes_AS_STRING(suffix);
    piece->suffix_len = PyBytes_GET_SIZE(suffix);
    if (null_text != Py_None) {
        if (!PyBytes_Check(null_text)) {
            PyErr_SetString(PyExc_TypeError, "piece: null_text is bytes or None");
            return -1;
        }
        piece->null_text = PyBytes_AS_STRING(null_text);
        piece->null_len = PyBytes_GET_SIZE(null_text);
    }
    const void *data;
    Py_ssize_t count;
    if (piece_buffer(piece, valid, 1, &data, &count, 1, "valid") < 0)
        return -1;
    piece->valid = data;
    if (data != NULL && count < n) {
        PyErr_SetString(PyExc_ValueError, "piece: valid is shorter than the rows");
        return -1;
    }
    if (piece->kind == K_CONST)
        return 0;
    if (piece_buffer(piece, a, 8, &data, &piece->a_len, 0, "a") < 0)
        return -1;
    piece->a = data;
    if (piece->a_len < n) {
        PyErr_SetString(PyExc_ValueError, "piece: a is shorter than the rows");
        return -1;
    }
    if (piece->kind == K_TEXT || piece->kind == K_CODE) {
        if (piece_buffer(piece, b, 8, &data, &piece->b_len, 0, "b") < 0)
            return -1;
        piece->b = data;
        if (piece_buffer(piece, c, 1, &data, &piece->c_len, 1, "c") < 0)
            return -1;
        piece->c = data;
        if (piece->kind == K_TEXT && piece->b_len < n) {
            PyErr_SetString(PyExc_ValueError, "piece: b is shorter than the rows");
            return -1;
        }
    }
    return 0;
}

static int piece_row(Out *out, const Piece *piece, Py_ssize_t i) {
    if (piece->valid != NULL && !piece->valid[i]) {
        if (piece->null_text != NULL)
            return out_put(out, piece->null_text, piece->null_len);
        return 0;
    }
    if (out_put(out, piece->prefix, piece->prefix_len) < 0)
        return -1;
    int status = 0;
    switch (piece->kind) {
    case K_INT:
        status = out_i64(out, piece->a[i]);
        break;
    case K_UINT:
        status = out_u64(out, (uint64_t)piece->a[i], 0);
        break;
    case K_TEXT: {
        int64_t start = piece->a[i], end = piece->b[i];
        if (start < 0 || end < start || end > piece->c_len) {
            PyErr_Format(PyExc_ValueError, "row %zd: text [%lld, %lld) outside its %zd bytes", i, (long long)start, (long long)end, piece->c_len);
            return -1;
        }
        status = out_put(out, piece->c + start, (Py_ssize_t)(end - start));
        break;
    }
    case K_CODE: {
        int64_t code = piece->a[i];
        if (code < 0 || code + 1 >= piece->b_len) {
            PyErr_Format(PyExc_ValueError, "row %zd: code %lld outside its table of %zd", i, (long long)code, piece->b_len ? piece->b_len - 1 : 0);
            return -1;
        }
        int64_t start = piece->b[code], end = piece->b[code + 1];
        if (start < 0 || end < start || end > piece->c_len) {
            PyErr_Format(PyExc_ValueError, "table entry %lld: [%lld, %lld) outside its %zd bytes", (long long)code, (long long)start, (long long)end, piece->c_len);
            return -1;
        }
        status = out_put(out, piece->c + start, (Py_ssize_t)(end - start));
        break;
    }
    case K_FILETIME:
        status = out_filetime(out, piece->a[i]);
        break;
    default:
        break;
    }
    if (status < 0)
        return -1;
    return out_put(out, piece->suffix, piece->suffix_len);
}

static PyObject *text_rows(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *list;
    const char *end;
    Py_ssize_t end_len;
    int with_offsets = 0;
    if (!PyArg_ParseTuple(args, "nO!y#|p", &n, &PyList_Type, &list, &end, &end_len, &with_offsets))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "rows: n is negative");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(list);
    Piece *pieces = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Piece));
    if (pieces == NULL)
        return PyErr_NoMemory();
    Out out = {NULL, NULL, 0, 0};
    int64_t *starts = NULL;
    PyObject *result = NULL;
    Py_ssize_t parsed = 0;
    for (; parsed < count; parsed++)
        if (piece_parse(PyList_GET_ITEM(list, parsed), &pieces[parsed], n) < 0) {
            piece_release(&pieces[parsed]);
            goto done;
        }
    if (with_offsets) {
        starts = PyMem_Malloc((size_t)(n + 1) * sizeof(int64_t));
        if (starts == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    /* room for what the rows will likely take, so that the text is seldom moved as it grows */
    Py_ssize_t guess = end_len;
    for (Py_ssize_t k = 0; k < count; k++) {
        const Piece *piece = &pieces[k];
        guess += piece->prefix_len + piece->suffix_len + 8;
        if (piece->kind == K_TEXT && n > 0)
            guess += piece->c_len / n;
    }
    if (n > 0 && guess <= PY_SSIZE_T_MAX / n && out_reserve(&out, guess * n) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (starts != NULL)
            starts[i] = out.len;
        for (Py_ssize_t k = 0; k < count; k++)
            if (piece_row(&out, &pieces[k], i) < 0)
                goto done;
        if (out_put(&out, end, end_len) < 0)
            goto done;
    }
    PyObject *text;
    if (out.bytes == NULL) {
        text = PyBytes_FromStringAndSize("", 0);
    } else {
        if (_PyBytes_Resize(&out.bytes, out.len) < 0)
            goto done;
        text = out.bytes;
        out.bytes = NULL;
    }
    if (text == NULL)
        goto done;
    if (starts == NULL) {
        result = text;
        goto done;
    }
    starts[n] = out.len;
    PyObject *offsets = PyBytes_FromStringAndSize((const char *)starts, (Py_ssize_t)((size_t)(n + 1) * sizeof(int64_t)));
    if (offsets == NULL) {
        Py_DECREF(text);
        goto done;
    }
    result = PyTuple_Pack(2, text, offsets);
    Py_DECREF(text);
    Py_DECREF(offsets);
done:
    for (Py_ssize_t k = 0; k < parsed; k++)
        piece_release(&pieces[k]);
    PyMem_Free(pieces);
    Py_XDECREF(out.bytes);
    PyMem_Free(starts);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", text_rows, METH_VARARGS, "rows(n, pieces, end, offsets=False): rows of text from columns (see the module doc)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_text", "Rows of text from columns (JSON lines).", -1, methods};

PyMODINIT_FUNC PyInit__text(void) { return PyModule_Create(&module); }
