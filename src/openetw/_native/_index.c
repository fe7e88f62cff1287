/* openetw._native._index: the index file's column coding, compiled.
 *
 * The twin of the numpy coding of ``consumer/_engine/blocks.py`` (the numpy code stays the
 * reference; both give the same bytes). A column of n unsigned little-endian values of ``width``
 * bytes is read from (or written to) a field of packed rows: ``itemsize`` bytes a row, the field
 * at byte ``at``. Its coding (all numbers little-endian):
 *
 *   RAW   0, then the n values as they are
 *   FOR   1, bits, the first value, the least of the others, then each other value minus that
 *         least in ``bits`` bits
 *   DICT  2, bits, the first value, the count d of distinct other values (u16, at most 4096),
 *         those d values in the order they first appear, then each other value's number in
 *         that list in ``bits`` bits
 *
 * Bits are packed from the lowest bit of the first byte on. The first value is kept apart so
 * that a column coded as differences (a block's first timestamp) does not widen the others.
 * FOR is taken when it is no larger than DICT, RAW when neither is smaller.
 *
 * Read back, a group's columns (a list of distinct tuples and each row's number in it) are
 * written into the rows' fields by ``gather_group``, each number checked against the list.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_read_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._index reads and writes little-endian data with native loads"
#endif

#define CODE_RAW 0
#define CODE_FOR 1
#define CODE_DICT 2
#define DICT_LIMIT 4096 /* at most this many distinct values for DICT (numbers of up to 12 bits) */
#define MAX_BITS 56     /* FOR wider than this: not packed */
#define TABLE_SLOTS 8192
#define TABLE_SHIFT 51 /* 64 - log2(TABLE_SLOTS) */

/* The n values of a field as u64. */
static void gather(const uint8_t *src, Py_ssize_t n, Py_ssize_t itemsize, Py_ssize_t width, uint64_t *out) {
    switch (width) {
    case 1:
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = src[i * itemsize];
        break;
    case 2:
        for (Py_ssize_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, src + i * itemsize, 2);
            out[i] = v;
        }
        break;
    case 4:
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t v;
            memcpy(&v, src + i * itemsize, 4);
            out[i] = v;
        }
        break;
    default:
        for (Py_ssize_t i = 0; i < n; i++)
            memcpy(&out[i], src + i * itemsize, 8);
    }
}

/* The n values back into the field (the inverse of ``gather``). */
static void scatter(const uint64_t *values, Py_ssize_t n, uint8_t *dst, Py_ssize_t itemsize, Py_ssize_t width) {
    switch (width) {
    case 1:
        for (Py_ssize_t i = 0; i < n; i++)
            dst[i * itemsize] = (uint8_t)values[i];
        break;
    case 2:
        for (Py_ssize_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)values[i];
            memcpy(dst + i * itemsize, &v, 2);
        }
        break;
    case 4:
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)values[i];
            memcpy(dst + i * itemsize, &v, 4);
        }
        break;
    default:
        for (Py_ssize_t i = 0; i < n; i++)
            memcpy(dst + i * itemsize, &values[i], 8);
    }
}

static inline uint64_t load(const uint8_t *p, Py_ssize_t width) {
    uint64_t v = 0;
    memcpy(&v, p, (size_t)width);
    return v;
}

static inline void store(uint8_t *p, uint64_t v, Py_ssize_t width) { memcpy(p, &v, (size_t)width); }

static int bits_of(uint64_t v) {
    int b = 0;
    while (v) {
        b++;
        v >>= 1;
    }
    return b;
}

static int check_field(Py_ssize_t itemsize, Py_ssize_t at, Py_ssize_t width, Py_ssize_t len) {
    if (width != 1 && width != 2 && width != 4 && width != 8) {
        PyErr_SetString(PyExc_ValueError, "width: 1, 2, 4 or 8 bytes");
        return -1;
    }
    if (itemsize <= 0 || at < 0 || at + width > itemsize || len % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "a field outside the rows, or not a whole number of rows");
        return -1;
    }
    return 0;
}

/* The distinct values of ``m`` values in order of first appearance, and each one's number in
 * them (codes); -1 when there are more than ``limit``. ``keys``/``slot_code``: TABLE_SLOTS each. */
static int dictionary(const uint64_t *vals, Py_ssize_t m, int limit, uint64_t *keys, int16_t *slot_code, uint64_t *values, uint16_t *codes) {
    memset(slot_code, -1, sizeof(int16_t) * TABLE_SLOTS);
    int count = 0;
    uint64_t last = 0;
    uint16_t last_code = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        uint64_t v = vals[i];
        if (count > 0 && v == last) { /* runs of one value are common */
            codes[i] = last_code;
            continue;
        }
        uint64_t h = (v * 0x9E3779B97F4A7C15ULL) >> TABLE_SHIFT;
        while (slot_code[h] >= 0 && keys[h] != v)
            h = (h + 1) & (TABLE_SLOTS - 1);
        if (slot_code[h] < 0) {
            if (count == limit)
                return -1;
            keys[h] = v;
            slot_code[h] = (int16_t)count;
            values[count++] = v;
        }
        last = v;
        last_code = codes[i] = (uint16_t)slot_code[h];
    }
    return count;
}

/* Packs m values of ``bits`` bits (1..MAX_BITS), each less ``base``, at dst. */
static void pack_u64(uint8_t *dst, const uint64_t *vals, Py_ssize_t m, int bits, uint64_t base) {
    uint64_t acc = 0;
    int held = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        acc |= (vals[i] - base) << held;
        held += bits;
        while (held >= 8) {
            *dst++ = (uint8_t)acc;
            acc >>= 8;
            held -= 8;
        }
    }
    if (held > 0)
        *dst = (uint8_t)acc;
}

static void pack_u16(uint8_t *dst, const uint16_t *vals, Py_ssize_t m, int bits) {
    uint64_t acc = 0;
    int held = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        acc |= (uint64_t)vals[i] << held;
        held += bits;
        while (held >= 8) {
            *dst++ = (uint8_t)acc;
            acc >>= 8;
            held -= 8;
        }
    }
    if (held > 0)
        *dst = (uint8_t)acc;
}

static Py_ssize_t packed_bytes(Py_ssize_t m, int bits) { return (m * bits + 7) / 8; }

/* Working memory of ``encode_one`` for columns of up to n values, made once for many columns. */
typedef struct {
    uint64_t *vals, *keys, *values;
    int16_t *slot_code;
    uint16_t *codes;
} Scratch;

static void scratch_free(Scratch *s) {
    PyMem_Free(s->vals);
    PyMem_Free(s->keys);
    PyMem_Free(s->values);
    PyMem_Free(s->slot_code);
    PyMem_Free(s->codes);
    *s = (Scratch){NULL, NULL, NULL, NULL, NULL};
}

static int scratch_init(Scratch *s, Py_ssize_t n) {
    s->vals = PyMem_Malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
    s->keys = PyMem_Malloc(sizeof(uint64_t) * TABLE_SLOTS);
    s->values = PyMem_Malloc(sizeof(uint64_t) * DICT_LIMIT);
    s->slot_code = PyMem_Malloc(sizeof(int16_t) * TABLE_SLOTS);
    s->codes = PyMem_Malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    if (s->vals == NULL || s->keys == NULL || s->values == NULL || s->slot_code == NULL || s->codes == NULL) {
        scratch_free(s);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The coded column of the n values of a field (``stride`` bytes apart from src), as bytes. */
static PyObject *encode_one(const uint8_t *src, Py_ssize_t n, Py_ssize_t stride, Py_ssize_t width, Scratch *scratch) {
    PyObject *result = NULL;
    uint64_t *vals = scratch->vals, *values = scratch->values;
    uint16_t *codes = scratch->codes;
    Py_ssize_t m = n > 0 ? n - 1 : 0;
    gather(src, n, stride, width, vals);
    Py_ssize_t raw_size = 1 + n * width;
    uint64_t low = ~0ULL, high = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t v = vals[i];
        low = v < low ? v : low;
        high = v > high ? v : high;
    }
    if (m == 0)
        low = high = 0;
    int for_bits = bits_of(high - low);
    Py_ssize_t for_size = for_bits <= MAX_BITS && n > 0 ? 2 + 2 * width + packed_bytes(m, for_bits) : raw_size + 1;
    int count = -1, dict_bits = 0;
    Py_ssize_t dict_size = raw_size + 1;
    if (n > 0 && for_bits > 0) {
        /* numbers of as many bits as FOR's would make DICT the larger: stop counting there */
        int limit = for_bits > 13 ? DICT_LIMIT : (1 << (for_bits - 1)) < DICT_LIMIT ? (1 << (for_bits - 1)) : DICT_LIMIT;
        count = dictionary(vals + 1, m, limit, scratch->keys, scratch->slot_code, values, codes);
        if (count > 0) {
            dict_bits = bits_of((uint64_t)(count - 1));
            dict_size = 2 + width + 2 + count * width + packed_bytes(m, dict_bits);
        }
    }
    Py_ssize_t size = for_size <= dict_size ? for_size : dict_size;
    int coding = for_size <= dict_size ? CODE_FOR : CODE_DICT;
    if (size >= raw_size) {
        size = raw_size;
        coding = CODE_RAW;
    }
    result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL)
        return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    memset(out, 0, (size_t)size);
    out[0] = (uint8_t)coding;
    if (coding == CODE_RAW) {
        for (Py_ssize_t i = 0; i < n; i++)
            store(out + 1 + i * width, vals[i], width);
    } else if (coding == CODE_FOR) {
        out[1] = (uint8_t)for_bits;
        store(out + 2, vals[0], width);
        store(out + 2 + width, low, width);
        if (for_bits > 0)
            pack_u64(out + 2 + 2 * width, vals + 1, m, for_bits, low);
    } else {
        out[1] = (uint8_t)dict_bits;
        store(out + 2, vals[0], width);
        out[2 + width] = (uint8_t)(count & 0xFF);
        out[3 + width] = (uint8_t)(count >> 8);
        for (int k = 0; k < count; k++)
            store(out + 4 + width + k * width, values[k], width);
        if (dict_bits > 0)
            pack_u16(out + 4 + width + count * width, codes, m, dict_bits);
    }
    return result;
}

/* encode_column(rows, itemsize, at, width) -> bytes: the coded column of a field (see the top). */
static PyObject *encode_column(PyObject *self, PyObject *args) {
    Py_buffer rows;
    Py_ssize_t itemsize, at, width;
    if (!PyArg_ParseTuple(args, "y*nnn", &rows, &itemsize, &at, &width))
        return NULL;
    PyObject *result = NULL;
    Scratch scratch;
    if (check_field(itemsize, at, width, rows.len) == 0 && scratch_init(&scratch, rows.len / itemsize) == 0) {
        result = encode_one((const uint8_t *)rows.buf + at, rows.len / itemsize, itemsize, width, &scratch);
        scratch_free(&scratch);
    }
    PyBuffer_Release(&rows);
    return result;
}

#define TILE_ROWS 256

/* encode_columns(rows, itemsize, fields) -> list of bytes: the coded column of each field of
 * ``fields`` ((offset, width) int64 pairs). The fields are first copied out a tile of rows at a
 * time (each row read once, while it is in the cache), then each is coded from its own copy. */
static PyObject *encode_columns(PyObject *self, PyObject *args) {
    Py_buffer rows, fields;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "y*ny*", &rows, &itemsize, &fields))
        return NULL;
    PyObject *result = NULL;
    uint8_t *columns = NULL;
    Scratch scratch = {NULL, NULL, NULL, NULL, NULL};
    Py_ssize_t count = fields.len / 16, total = 0;
    const int64_t *pairs = (const int64_t *)fields.buf;
    if (fields.len % 16 != 0 || itemsize <= 0) {
        PyErr_SetString(PyExc_ValueError, "fields: (offset, width) int64 pairs expected");
        goto done;
    }
    for (Py_ssize_t f = 0; f < count; f++) {
        if (check_field(itemsize, (Py_ssize_t)pairs[2 * f], (Py_ssize_t)pairs[2 * f + 1], rows.len) < 0)
            goto done;
        total += (Py_ssize_t)pairs[2 * f + 1];
    }
    Py_ssize_t n = rows.len / itemsize;
    columns = PyMem_Malloc((size_t)(n * total + 1));
    if (columns == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (scratch_init(&scratch, n) < 0)
        goto done;
    const uint8_t *in = (const uint8_t *)rows.buf;
    for (Py_ssize_t first = 0; first < n; first += TILE_ROWS) {
        Py_ssize_t last = first + TILE_ROWS < n ? first + TILE_ROWS : n;
        uint8_t *column = columns;
        for (Py_ssize_t f = 0; f < count; f++) {
            Py_ssize_t at = (Py_ssize_t)pairs[2 * f], width = (Py_ssize_t)pairs[2 * f + 1];
            for (Py_ssize_t i = first; i < last; i++)
                memcpy(column + i * width, in + i * itemsize + at, (size_t)width);
            column += n * width;
        }
    }
    result = PyList_New(count);
    if (result == NULL)
        goto done;
    uint8_t *column = columns;
    for (Py_ssize_t f = 0; f < count; f++) {
        Py_ssize_t width = (Py_ssize_t)pairs[2 * f + 1];
        PyObject *coded = encode_one(column, n, width, width, &scratch);
        if (coded == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, f, coded);
        column += n * width;
    }
done:
    scratch_free(&scratch);
    PyMem_Free(columns);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&fields);
    return result;
}

/* offset_residuals(rows, itemsize, buffer_at, offset_at, size_at) -> bytes (u32 each): each
 * row's offset (u32 fields) less the 8-aligned end of the row before it of the same buffer, the
 * first row of each buffer keeping its offset (``blocks._offset_residuals``'s numpy reference). */
static PyObject *offset_residuals(PyObject *self, PyObject *args) {
    Py_buffer rows;
    Py_ssize_t itemsize, buffer_at, offset_at, size_at;
    if (!PyArg_ParseTuple(args, "y*nnnn", &rows, &itemsize, &buffer_at, &offset_at, &size_at))
        return NULL;
    PyObject *result = NULL;
    uint32_t *keys = NULL, *ends = NULL;
    uint8_t *used = NULL;
    if (check_field(itemsize, buffer_at, 4, rows.len) < 0 || check_field(itemsize, offset_at, 4, rows.len) < 0 ||
        check_field(itemsize, size_at, 4, rows.len) < 0)
        goto done;
    Py_ssize_t n = rows.len / itemsize, slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    keys = PyMem_Malloc(sizeof(uint32_t) * (size_t)slots);
    ends = PyMem_Malloc(sizeof(uint32_t) * (size_t)slots);
    used = PyMem_Calloc((size_t)slots, 1);
    result = PyBytes_FromStringAndSize(NULL, 4 * n);
    if (keys == NULL || ends == NULL || used == NULL || result == NULL) {
        Py_CLEAR(result);
        PyErr_NoMemory();
        goto done;
    }
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(result);
    const uint8_t *row = (const uint8_t *)rows.buf;
    for (Py_ssize_t i = 0; i < n; i++, row += itemsize) {
        uint32_t buffer, offset, size;
        memcpy(&buffer, row + buffer_at, 4);
        memcpy(&offset, row + offset_at, 4);
        memcpy(&size, row + size_at, 4);
        uint64_t h = (((uint64_t)buffer * 0x9E3779B97F4A7C15ULL) >> 32) & (uint64_t)(slots - 1);
        while (used[h] && keys[h] != buffer)
            h = (h + 1) & (uint64_t)(slots - 1);
        uint32_t before = used[h] ? ends[h] : 0;
        out[i] = offset - before;
        used[h] = 1;
        keys[h] = buffer;
        ends[h] = offset + (uint32_t)((size + OE_RECORD_ALIGNMENT - 1) & ~(uint32_t)(OE_RECORD_ALIGNMENT - 1));
    }
done:
    PyMem_Free(keys);
    PyMem_Free(ends);
    PyMem_Free(used);
    PyBuffer_Release(&rows);
    return result;
}


#define KEY_LIMIT 64 /* at most this many bytes of fields in a descriptor */
#define KEY_WORD 8   /* keys are hashed a uint64 at a time, zero-padded to whole words */

/* descriptor_codes(rows, itemsize, spans) -> (codes, firsts): rows with the same bytes in every
 * span of ``spans`` ((offset, length) int64 pairs, each inside a row) share a number, numbered
 * in the order they first appear: ``codes`` each row's number (u32 each), ``firsts`` the row
 * where each number first appears (i64 each) (``blocks._descriptor_codes``'s numpy reference). */
static PyObject *descriptor_codes(PyObject *self, PyObject *args) {
    Py_buffer rows, fields;
    Py_ssize_t itemsize;
    if (!PyArg_ParseTuple(args, "y*ny*", &rows, &itemsize, &fields))
        return NULL;
    PyObject *codes = NULL, *firsts = NULL, *result = NULL;
    int64_t *slots = NULL, *first_rows = NULL;
    uint8_t *seen = NULL;
    Py_ssize_t count = fields.len / 16, klen = 0, distinct = 0;
    const int64_t *pairs = (const int64_t *)fields.buf;
    if (fields.len % 16 != 0 || itemsize <= 0 || rows.len % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "spans: (offset, length) int64 pairs over whole rows expected");
        goto done;
    }
    for (Py_ssize_t f = 0; f < count; f++) {
        int64_t at = pairs[2 * f], length = pairs[2 * f + 1];
        if (at < 0 || length <= 0 || length > KEY_LIMIT || at + length > itemsize) {
            PyErr_SetString(PyExc_ValueError, "a span outside the rows");
            goto done;
        }
        klen += (Py_ssize_t)length;
    }
    if (klen > KEY_LIMIT) {
        PyErr_SetString(PyExc_ValueError, "spans: more bytes than a descriptor holds");
        goto done;
    }
    Py_ssize_t n = rows.len / itemsize, size = 16, stride = (klen + KEY_WORD - 1) / KEY_WORD * KEY_WORD;
    while (size < 2 * n)
        size *= 2;
    slots = PyMem_Malloc(sizeof(int64_t) * (size_t)size);
    first_rows = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    seen = PyMem_Malloc((size_t)(stride * (n ? n : 1)));
    codes = PyBytes_FromStringAndSize(NULL, 4 * n);
    if (slots == NULL || first_rows == NULL || seen == NULL || codes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memset(slots, 0xFF, sizeof(int64_t) * (size_t)size);
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(codes);
    const uint8_t *in = (const uint8_t *)rows.buf;
    uint8_t key[KEY_LIMIT] = {0}; /* the bytes past klen stay 0 */
    uint32_t last_code = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *row = in + i * itemsize;
        Py_ssize_t k = 0;
        for (Py_ssize_t f = 0; f < count; f++) {
            memcpy(key + k, row + pairs[2 * f], (size_t)pairs[2 * f + 1]);
            k += (Py_ssize_t)pairs[2 * f + 1];
        }
        if (i > 0 && memcmp(key, seen + (Py_ssize_t)last_code * stride, (size_t)stride) == 0) { /* runs of one descriptor */
            out[i] = last_code;
            continue;
        }
        uint64_t h = 0;
        for (Py_ssize_t b = 0; b < stride; b += KEY_WORD) {
            uint64_t word;
            memcpy(&word, key + b, sizeof word);
            h = (h ^ word) * 0x9E3779B97F4A7C15ULL;
            h ^= h >> 32;
        }
        h &= (uint64_t)(size - 1);
        for (;;) {
            int64_t slot = slots[h];
            if (slot < 0) {
                slots[h] = distinct;
                first_rows[distinct] = i;
                memcpy(seen + distinct * stride, key, (size_t)stride);
                last_code = (uint32_t)distinct++;
                break;
            }
            if (memcmp(key, seen + slot * stride, (size_t)stride) == 0) {
                last_code = (uint32_t)slot;
                break;
            }
            h = (h + 1) & (uint64_t)(size - 1);
        }
        out[i] = last_code;
    }
    firsts = PyBytes_FromStringAndSize((const char *)first_rows, 8 * distinct);
    if (firsts != NULL)
        result = PyTuple_Pack(2, codes, firsts);
done:
    Py_XDECREF(codes);
    Py_XDECREF(firsts);
    PyMem_Free(slots);
    PyMem_Free(first_rows);
    PyMem_Free(seen);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&fields);
    return result;
}

/* Unpacks m values of ``bits`` bits (1..MAX_BITS) from src into out: each plus ``base``, or its
 * entry of ``table`` (of ``count``); -1 when a number is past the table. */
static int unpack(const uint8_t *src, Py_ssize_t m, int bits, uint64_t *out, uint64_t base, const uint64_t *table, Py_ssize_t count) {
    uint64_t acc = 0, mask = (1ULL << bits) - 1;
    int held = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        while (held < bits) {
            acc |= (uint64_t)(*src++) << held;
            held += 8;
        }
        uint64_t v = acc & mask;
        acc >>= bits;
        held -= bits;
        if (table != NULL) {
            if ((Py_ssize_t)v >= count)
                return -1;
            v = table[v];
        } else {
            v = v + base;
        }
        out[i] = v;
    }
    return 0;
}

/* decode_column(data, rows, itemsize, at, width): fill the field of every row of ``rows`` (a
 * writable buffer of packed rows) from a coded column; ValueError when it is not one of n rows. */
static PyObject *decode_column(PyObject *self, PyObject *args) {
    Py_buffer data, rows;
    Py_ssize_t itemsize, at, width;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &data, &rows, &itemsize, &at, &width))
        return NULL;
    PyObject *result = NULL;
    uint64_t *vals = NULL, *table = NULL;
    if (check_field(itemsize, at, width, rows.len) < 0)
        goto done;
    Py_ssize_t n = rows.len / itemsize, m = n > 0 ? n - 1 : 0;
    const uint8_t *in = (const uint8_t *)data.buf;
    uint8_t *dst = (uint8_t *)rows.buf + at;
    Py_ssize_t len = data.len;
    vals = PyMem_Malloc(sizeof(uint64_t) * (n ? n : 1));
    if (vals == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (len < 1)
        goto bad;
    if (in[0] == CODE_RAW) {
        if (len != 1 + n * width)
            goto bad;
        for (Py_ssize_t i = 0; i < n; i++)
            vals[i] = load(in + 1 + i * width, width);
    } else if (in[0] == CODE_FOR) {
        if (n < 1 || len < 2 + 2 * width)
            goto bad;
        int bits = in[1];
        if (bits > MAX_BITS || bits > 8 * width || len != 2 + 2 * width + packed_bytes(m, bits))
            goto bad;
        vals[0] = load(in + 2, width);
        uint64_t base = load(in + 2 + width, width);
        if (bits == 0) {
            for (Py_ssize_t i = 1; i < n; i++)
                vals[i] = base;
        } else {
            unpack(in + 2 + 2 * width, m, bits, vals + 1, base, NULL, 0);
        }
    } else if (in[0] == CODE_DICT) {
        if (n < 1 || len < 4 + width)
            goto bad;
        int bits = in[1];
        Py_ssize_t count = in[2 + width] | (in[3 + width] << 8);
        if (count < 1 || count > DICT_LIMIT || bits != bits_of((uint64_t)(count - 1)) || len != 4 + width + count * width + packed_bytes(m, bits))
            goto bad;
        vals[0] = load(in + 2, width);
        table = PyMem_Malloc(sizeof(uint64_t) * (size_t)count);
        if (table == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < count; k++)
            table[k] = load(in + 4 + width + k * width, width);
        if (bits == 0) {
            for (Py_ssize_t i = 1; i < n; i++)
                vals[i] = table[0];
        } else if (unpack(in + 4 + width + count * width, m, bits, vals + 1, 0, table, count) < 0) {
            goto bad;
        }
    } else {
        goto bad;
    }
    scatter(vals, n, dst, itemsize, width);
    result = Py_None;
    Py_INCREF(result);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "a coded column of another shape");
done:
    PyMem_Free(vals);
    PyMem_Free(table);
    PyBuffer_Release(&data);
    PyBuffer_Release(&rows);
    return result;
}
/* One move of ``length`` bytes; the lengths a row's groups take, each a fixed-size copy. */
static inline void move_bytes(uint8_t *dst, const uint8_t *src, Py_ssize_t length) {
    switch (length) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 12: memcpy(dst, src, 12); break;
    case 15: memcpy(dst, src, 15); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, (size_t)length);
    }
}

/* gather_group(codes, table, table_stride, out, out_stride, moves): for each row i of ``out``
 * (packed rows of ``out_stride`` bytes, as many as ``codes`` has u32 numbers) and each move
 * (src_at, dst_at, length) of ``moves`` (int64 triples), the ``length`` bytes at ``src_at`` of
 * the table's row ``codes[i]`` (packed rows of ``table_stride`` bytes) written at ``dst_at`` of
 * row i; ValueError when a number is past the table (a damaged block) or a move is outside a row. */
static PyObject *gather_group(PyObject *self, PyObject *args) {
    Py_buffer codes, table, out, moves;
    Py_ssize_t table_stride, out_stride;
    if (!PyArg_ParseTuple(args, "y*y*nw*ny*", &codes, &table, &table_stride, &out, &out_stride, &moves))
        return NULL;
    PyObject *result = NULL;
    if (codes.len % 4 != 0 || moves.len % 24 != 0 || table_stride <= 0 || out_stride <= 0 || table.len % table_stride != 0) {
        PyErr_SetString(PyExc_ValueError, "numbers of 4 bytes, moves of three int64, whole table rows");
        goto done;
    }
    Py_ssize_t n = codes.len / 4, count = table.len / table_stride, k = moves.len / 24;
    if (out.len != n * out_stride) {
        PyErr_SetString(PyExc_ValueError, "as many rows out as numbers");
        goto done;
    }
    int64_t place[3 * 8];
    if (k < 1 || k > 8) {
        PyErr_SetString(PyExc_ValueError, "one to eight moves");
        goto done;
    }
    memcpy(place, moves.buf, (size_t)moves.len);
    for (Py_ssize_t j = 0; j < k; j++) {
        int64_t from = place[3 * j], to = place[3 * j + 1], length = place[3 * j + 2];
        if (from < 0 || to < 0 || length < 1 || from + length > table_stride || to + length > out_stride) {
            PyErr_SetString(PyExc_ValueError, "a move outside a row");
            goto done;
        }
    }
    const uint8_t *numbers = (const uint8_t *)codes.buf, *src = (const uint8_t *)table.buf;
    uint8_t *dst = (uint8_t *)out.buf;
    if (k == 1 && place[0] == 0 && place[1] == 0 && place[2] == table_stride && place[2] == out_stride && (out_stride == 1 || out_stride == 2 || out_stride == 4 || out_stride == 8)) {
        /* one whole column into its own array: a typed take */
#define TAKE(type)                                                                                                                         \
    for (Py_ssize_t i = 0; i < n; i++) {                                                                                                   \
        uint32_t c;                                                                                                                        \
        memcpy(&c, numbers + 4 * i, 4);                                                                                                    \
        if ((Py_ssize_t)c >= count)                                                                                                        \
            goto bad;                                                                                                                      \
        memcpy(dst + i * (Py_ssize_t)sizeof(type), src + (Py_ssize_t)c * (Py_ssize_t)sizeof(type), sizeof(type));                       \
    }
        switch (out_stride) {
        case 1: TAKE(uint8_t) break;
        case 2: TAKE(uint16_t) break;
        case 4: TAKE(uint32_t) break;
        default: TAKE(uint64_t)
        }
#undef TAKE
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t c;
            memcpy(&c, numbers + 4 * i, 4);
            if ((Py_ssize_t)c >= count)
                goto bad;
            const uint8_t *from = src + (Py_ssize_t)c * table_stride;
            uint8_t *to = dst + i * out_stride;
            for (Py_ssize_t j = 0; j < k; j++)
                move_bytes(to + place[3 * j + 1], from + place[3 * j], (Py_ssize_t)place[3 * j + 2]);
        }
    }
    result = Py_None;
    Py_INCREF(result);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "a group number past its table");
done:
    PyBuffer_Release(&codes);
    PyBuffer_Release(&table);
    PyBuffer_Release(&out);
    PyBuffer_Release(&moves);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_column", encode_column, METH_VARARGS, "The coded column of a field of packed rows."},
    {"encode_columns", encode_columns, METH_VARARGS, "The coded columns of fields of packed rows."},
    {"offset_residuals", offset_residuals, METH_VARARGS, "Each row's offset less the end of the row before it in its buffer."},
    {"descriptor_codes", descriptor_codes, METH_VARARGS, "Each row's number among the distinct descriptors of a block."},
    {"decode_column", decode_column, METH_VARARGS, "Fill a field of packed rows from its coded column."},
    {"gather_group", gather_group, METH_VARARGS, "Write each row's listed tuple of a group into the rows' fields."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_index", "The index file's column coding, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__index(void) { return PyModule_Create(&module); }
