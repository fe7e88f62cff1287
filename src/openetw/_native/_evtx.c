/* openetw._native._evtx: the compiled twin of the .evtx record parser and XML renderer.
 *
 *   Chunk(data)                      one 64 KiB chunk's bytes, its template definitions cached
 *   Chunk.walk(pos, free, ...)       the records Chunk.record accepts from pos on, as columns,
 *                                    their <System> facts too (record.header_from_tree's values)
 *   Chunk.record(start, end)         a record's BinXml parsed as evtx/binxml.ChunkParser.parse
 *                                    and checked as render.check_expansion: (end of the BinXml,
 *                                    the XML of render.Renderer.xml or None) or None
 *   value_text(type, data)           render.value_text_lenient's text, or None
 *
 * The pure-Python code is the reference. This one only ever says "accepted" for a record the
 * pure parser accepts, in the same state (template definitions are parsed and cached in the
 * same order, fragments counted the same way): anything else (damage, a value whose text the C
 * does not write, a depth near the bound) is None, and the caller asks the pure code, which
 * then also gives the error. Every constant comes from _evtx_constants.h, generated from
 * evtx/layout.py, evtx/binxml.py, evtx/values.py and evtx/render.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_evtx_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._evtx reads little-endian data with native loads"
#endif

static inline uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static const uint8_t FIXED_SIZES[256] = OE_FIXED_SIZES;

/* A depth this close to the bound is left to the pure code (where the bound is checked
 * depends on what was cached first there). */
#define DEPTH_LIMIT (OE_MAX_DEPTH - 4)

/* ------------------------------------------------------------------------------------------
 * Nodes: two arenas, one kept for the chunk (template definitions), one per record. A reference
 * is an index with the top bit set for the record arena; NIL ends a list.
 */
#define NIL 0xFFFFFFFFu
#define REC 0x80000000u

enum { N_ELEMENT, N_ATTRIBUTE, N_TEXT, N_SUBST, N_CHARREF, N_ENTREF, N_CDATA, N_PI, N_INSTANCE };

typedef struct {
    uint8_t kind, vtype, optional, single; /* single: an element whose whole content is one substitution */
    uint8_t fact;                          /* system_facts' name code + 1 (0: not yet looked up) */
    int32_t shape;                         /* EventData: its shape's index + 1, SHAPE_NONE, 0 until read */
    uint32_t index;                        /* substitution index, character code, template number */
    uint32_t a, b;                         /* name or text: chunk offset of its UTF-16 units and their count */
    uint32_t c, d;                         /* PI data; instance: first value, value count */
    uint32_t first, last;                  /* element children, attribute parts */
    uint32_t attrs, attrs_last;            /* element attributes */
    uint32_t next;
    int32_t chars; /* characters of the name (or text) once decoded, -1 until counted */
    uint32_t u8off, u8len; /* the name as UTF-8 in the chunk's name text, u8len NIL until written */
} Node;

typedef struct {
    uint8_t type;
    uint32_t off, size;
    uint32_t nested;  /* the nodes of a BinXml value, or NIL */
    uint32_t gen;     /* the check that cached cost */
    int64_t cost;
} Val;

typedef struct {
    Node *nodes;
    uint32_t n, cap;
    Val *vals;
    uint32_t nv, capv;
} Arena;

typedef struct {
    uint32_t offset, size;
    uint8_t guid[16];
    uint32_t nodes;
    int summarized;
    int64_t literal;
    int has_instances;
    uint32_t *array_slots;
    uint32_t n_array_slots;
} Template;

typedef struct {
    PyObject_HEAD
    PyObject *bytes;
    const uint8_t *data;
    uint32_t limit;
    Arena arena[2]; /* 0: the chunk's, 1: the record's */
    Template *templates;
    uint32_t nt, capt;
    uint32_t *slot_key;   /* a hash of chunk offset + 1 -> template number + 1, -1 while it is being parsed */
    int32_t *slot_value;
    uint32_t slots, used;
    uint32_t work;
    uint32_t gen;
    int failed; /* out of memory */
    char *names;  /* element and attribute names written once as UTF-8 (Node.u8off, u8len) */
    size_t names_len, names_cap;
    struct Sys_ *sys; /* the <System> facts being read, during system_facts */
    PyObject *shapes; /* EventData shapes: a tuple of field names each, in the order first met */
    int empty_shape;  /* the shape of no fields: its index + 1, 0 until met */
    PyObject *shape_ids; /* the shapes of records with array values: names -> index + 1 */
} Chunk;

static inline Arena *arena_of(Chunk *c, uint32_t ref) { return &c->arena[ref & REC ? 1 : 0]; }
static inline Node *N(Chunk *c, uint32_t ref) { return &arena_of(c, ref)->nodes[ref & ~REC]; }
static inline Val *VAL(Chunk *c, uint32_t ref) { return &arena_of(c, ref)->vals[ref & ~REC]; }

static uint32_t new_node(Chunk *c, int rec, uint8_t kind) {
    Arena *a = &c->arena[rec];
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? a->cap * 2 : 256;
        Node *p = PyMem_Realloc(a->nodes, (size_t)cap * sizeof(Node));
        if (!p) { c->failed = 1; return NIL; }
        a->nodes = p;
        a->cap = cap;
    }
    uint32_t i = a->n++;
    Node *n = &a->nodes[i];
    memset(n, 0, sizeof(*n));
    n->kind = kind;
    n->first = n->last = n->attrs = n->attrs_last = n->next = NIL;
    n->chars = -1;
    n->u8len = NIL;
    return i | (rec ? REC : 0);
}

static uint32_t new_vals(Chunk *c, int rec, uint32_t count) {
    Arena *a = &c->arena[rec];
    if ((uint64_t)a->nv + count > a->capv) {
        uint64_t cap = a->capv ? a->capv : 64;
        while (cap < (uint64_t)a->nv + count) cap *= 2;
        if (cap > 0x7FFFFFFF) { c->failed = 1; return NIL; }
        Val *p = PyMem_Realloc(a->vals, (size_t)cap * sizeof(Val));
        if (!p) { c->failed = 1; return NIL; }
        a->vals = p;
        a->capv = (uint32_t)cap;
    }
    uint32_t i = a->nv;
    a->nv += count;
    return i | (rec ? REC : 0);
}

typedef struct { uint32_t first, last; } List;

static void append(Chunk *c, List *l, uint32_t ref) {
    if (l->first == NIL) l->first = ref;
    else N(c, l->last)->next = ref;
    l->last = ref;
}

/* ------------------------------------------------------------------------------------------
 * The parser: binxml.ChunkParser, check for check. -1 is "not accepted" (the pure code says why).
 */

static int read_name(Chunk *c, uint32_t pos, uint32_t *name, uint32_t *count, uint32_t *after) {
    uint64_t limit = c->limit;
    if ((uint64_t)pos + 4 > limit) return -1;
    uint32_t offset = rd32(c->data + pos);
    pos += 4;
    if (offset != pos && (offset < 0x80 || offset >= limit)) return -1;
    if ((uint64_t)offset + 8 > limit) return -1;
    uint32_t n = rd16(c->data + offset + 6);
    uint64_t end = (uint64_t)offset + 8 + 2 * (uint64_t)n;
    if (end + 2 > limit) return -1;
    *name = offset + 8;
    *count = n;
    *after = offset == pos ? (uint32_t)end + 2 : pos;
    return 0;
}

static int utf16_run(Chunk *c, uint32_t pos, uint32_t *text, uint32_t *count, uint32_t *after) {
    if ((uint64_t)pos + 2 > c->limit) return -1;
    uint32_t n = rd16(c->data + pos);
    uint64_t end = (uint64_t)pos + 2 + 2 * (uint64_t)n;
    if (end > c->limit) return -1;
    *text = pos + 2;
    *count = n;
    *after = (uint32_t)end;
    return 0;
}

static int parse(Chunk *c, int rec, uint32_t pos, uint32_t end, int depth, int in_template, uint32_t *out, uint32_t *after);

static int32_t *slot_of(Chunk *c, uint32_t offset, int add) {
    uint32_t key = offset + 1, mask = c->slots - 1;
    uint32_t i = (key * 2654435761u) & mask;
    while (c->slot_key[i] && c->slot_key[i] != key) i = (i + 1) & mask;
    if (c->slot_key[i] == key) return &c->slot_value[i];
    if (!add) return NULL;
    if (2 * (c->used + 1) > c->slots) {
        uint32_t old = c->slots, *keys = c->slot_key;
        int32_t *values = c->slot_value;
        uint32_t *new_keys = PyMem_Calloc(2 * (size_t)old, sizeof(uint32_t));
        int32_t *new_values = PyMem_Calloc(2 * (size_t)old, sizeof(int32_t));
        if (!new_keys || !new_values) {
            PyMem_Free(new_keys);
            PyMem_Free(new_values);
            c->failed = 1;
            return NULL;
        }
        c->slot_key = new_keys;
        c->slot_value = new_values;
        c->slots = 2 * old;
        c->used = 0;
        for (uint32_t j = 0; j < old; j++)
            if (keys[j]) *slot_of(c, keys[j] - 1, 1) = values[j];
        PyMem_Free(keys);
        PyMem_Free(values);
        return slot_of(c, offset, 1);
    }
    c->slot_key[i] = key;
    c->slot_value[i] = 0;
    c->used++;
    return &c->slot_value[i];
}

static int template_at(Chunk *c, uint32_t offset, int depth, Template **found) {
    int32_t *seen = slot_of(c, offset, 0);
    int32_t known = seen ? *seen : 0;
    if (known > 0) { *found = &c->templates[known - 1]; return 0; }
    if (offset < 0x200 || (uint64_t)offset + 24 > c->limit) return -1;
    if (known < 0) return -1; /* it instantiates itself */
    uint32_t size = rd32(c->data + offset + 20);
    uint64_t start = (uint64_t)offset + 24;
    if (start + size > c->limit) return -1;
    seen = slot_of(c, offset, 1);
    if (!seen) return -1;
    *seen = -1;
    uint32_t nodes, ignored;
    int rc = parse(c, 0, (uint32_t)start, (uint32_t)(start + size), depth + 1, 1, &nodes, &ignored);
    seen = slot_of(c, offset, 0); /* the table may have grown */
    *seen = 0;
    if (rc < 0) return -1;
    if (c->nt == c->capt) {
        uint32_t cap = c->capt ? c->capt * 2 : 32;
        Template *p = PyMem_Realloc(c->templates, cap * sizeof(Template));
        if (!p) { c->failed = 1; return -1; }
        c->templates = p;
        c->capt = cap;
    }
    Template *t = &c->templates[c->nt++];
    memset(t, 0, sizeof(*t));
    t->offset = offset;
    t->size = size;
    memcpy(t->guid, c->data + offset + 4, 16);
    t->nodes = nodes;
    *slot_of(c, offset, 0) = (int32_t)c->nt;
    *found = t;
    return 0;
}

static int instance(Chunk *c, int rec, uint32_t pos, uint32_t end, int depth, uint32_t *node, uint32_t *after) {
    if ((uint64_t)pos + 10 > end) return -1;
    uint32_t template_id = rd32(c->data + pos + 2);
    uint32_t def_offset = rd32(c->data + pos + 6);
    pos += 10;
    Template *t;
    if (template_at(c, def_offset, depth, &t) < 0) return -1;
    uint32_t tnum = (uint32_t)(t - c->templates);
    if (memcmp(t->guid, &template_id, 4) != 0) return -1;
    if (def_offset == pos) pos = def_offset + 24 + t->size;
    if ((uint64_t)pos + 4 > end) return -1;
    uint32_t count = rd32(c->data + pos);
    pos += 4;
    if ((uint64_t)pos + 4 * (uint64_t)count > end) return -1;
    uint32_t vals = new_vals(c, rec, count);
    if (vals == NIL && count) return -1;
    uint64_t at = (uint64_t)pos + 4 * (uint64_t)count;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *d = c->data + pos + 4 * i;
        uint32_t size = rd16(d);
        uint8_t type = d[2];
        uint32_t nested = NIL;
        if (type == OE_VT_BINXML && size) {
            if (at + size > end) return -1;
            uint32_t ignored;
            if (parse(c, rec, (uint32_t)at, (uint32_t)(at + size), depth + 1, 0, &nested, &ignored) < 0) return -1;
        }
        Val *v = VAL(c, vals + i);
        v->type = type;
        v->off = (uint32_t)(at < 0xFFFFFFFFu ? at : 0xFFFFFFFFu);
        v->size = size;
        v->nested = nested;
        v->gen = 0;
        v->cost = 0;
        at += size;
    }
    if (at > end) return -1;
    uint32_t n = new_node(c, rec, N_INSTANCE);
    if (n == NIL) return -1;
    Node *node_ = N(c, n);
    node_->index = tnum;
    node_->c = count ? vals : NIL;
    node_->d = count;
    *node = n;
    *after = (uint32_t)at;
    return 0;
}

static int parse(Chunk *c, int rec, uint32_t pos, uint32_t end, int depth, int in_template, uint32_t *out_list, uint32_t *after) {
    if (depth > OE_MAX_DEPTH) return -1;
    if (++c->work > OE_MAX_FRAGMENTS) return -1;
    const uint8_t *data = c->data;
    if (end > c->limit) end = c->limit;
    List out = {NIL, NIL};
    uint32_t stack[OE_MAX_DEPTH];
    List children[OE_MAX_DEPTH];
    int top = 0;
    uint32_t attribute = NIL;
#define PARENT (top ? &children[top - 1] : &out)
    while (pos < end) {
        uint8_t token = data[pos];
        int kind = (token & 0xB0) == 0 ? token & 0x0F : -1;
        if (kind == OE_TOKEN_EOF) {
            pos += 1;
            if (top) return -1;
            *out_list = out.first;
            *after = pos;
            return 0;
        }
        if (kind == OE_TOKEN_OPEN_START) {
            if (top >= OE_MAX_DEPTH) return -1;
            if ((uint64_t)pos + 11 > end) return -1;
            uint32_t name_offset = rd32(data + pos + 7);
            uint32_t name_at = pos + 11;
            if (!(name_offset == name_at || (0x80 <= name_offset && name_offset < pos))) {
                uint32_t short_name = rd32(data + pos + 5);
                if (short_name == pos + 9 || (0x80 <= short_name && short_name < pos)) name_at = pos + 9;
                else return -1;
            }
            uint32_t n = new_node(c, rec, N_ELEMENT);
            if (n == NIL) return -1;
            uint32_t name, count, next;
            if (read_name(c, name_at - 4, &name, &count, &next) < 0) return -1;
            N(c, n)->a = name;
            N(c, n)->b = count;
            if (token & OE_TOKEN_FLAG_MORE) next += 4;
            pos = next;
            append(c, PARENT, n);
            stack[top] = n;
            children[top].first = children[top].last = NIL;
            top++;
            attribute = NIL;
        } else if (kind == OE_TOKEN_ATTRIBUTE) {
            if (!top) return -1;
            uint32_t n = new_node(c, rec, N_ATTRIBUTE);
            if (n == NIL) return -1;
            uint32_t name, count;
            if (read_name(c, pos + 1, &name, &count, &pos) < 0) return -1;
            N(c, n)->a = name;
            N(c, n)->b = count;
            Node *el = N(c, stack[top - 1]);
            if (el->attrs == NIL) el->attrs = n;
            else N(c, el->attrs_last)->next = n;
            el->attrs_last = n;
            attribute = n;
        } else if (kind == OE_TOKEN_CLOSE_START) {
            if (!top) return -1;
            attribute = NIL;
            pos += 1;
        } else if (kind == OE_TOKEN_CLOSE_EMPTY || kind == OE_TOKEN_END_ELEMENT) {
            if (!top) return -1;
            top--;
            Node *el = N(c, stack[top]);
            el->first = children[top].first;
            el->last = children[top].last;
            attribute = NIL;
            pos += 1;
        } else if (kind == OE_TOKEN_VALUE || kind == OE_TOKEN_NORMAL_SUBSTITUTION || kind == OE_TOKEN_OPTIONAL_SUBSTITUTION ||
                   kind == OE_TOKEN_CHAR_REF || kind == OE_TOKEN_ENTITY_REF) {
            uint32_t n;
            if (kind == OE_TOKEN_VALUE) {
                if ((uint64_t)pos + 2 > end) return -1;
                if (data[pos + 1] != OE_VT_STRING) return -1;
                n = new_node(c, rec, N_TEXT);
                if (n == NIL) return -1;
                uint32_t text, count;
                if (utf16_run(c, pos + 2, &text, &count, &pos) < 0) return -1;
                N(c, n)->a = text;
                N(c, n)->b = count;
            } else if (kind == OE_TOKEN_CHAR_REF) {
                if ((uint64_t)pos + 3 > end) return -1;
                n = new_node(c, rec, N_CHARREF);
                if (n == NIL) return -1;
                N(c, n)->index = rd16(data + pos + 1);
                pos += 3;
            } else if (kind == OE_TOKEN_ENTITY_REF) {
                n = new_node(c, rec, N_ENTREF);
                if (n == NIL) return -1;
                uint32_t name, count;
                if (read_name(c, pos + 1, &name, &count, &pos) < 0) return -1;
                N(c, n)->a = name;
                N(c, n)->b = count;
            } else {
                if (!in_template) return -1;
                if ((uint64_t)pos + 4 > end) return -1;
                n = new_node(c, rec, N_SUBST);
                if (n == NIL) return -1;
                N(c, n)->index = rd16(data + pos + 1);
                N(c, n)->vtype = data[pos + 3];
                N(c, n)->optional = kind == OE_TOKEN_OPTIONAL_SUBSTITUTION;
                pos += 4;
            }
            if (attribute != NIL) {
                Node *at = N(c, attribute);
                List parts = {at->first, at->last};
                append(c, &parts, n);
                at = N(c, attribute);
                at->first = parts.first;
                at->last = parts.last;
            } else {
                append(c, PARENT, n);
            }
        } else if (kind == OE_TOKEN_CDATA) {
            uint32_t n = new_node(c, rec, N_CDATA);
            if (n == NIL) return -1;
            uint32_t text, count;
            if (utf16_run(c, pos + 1, &text, &count, &pos) < 0) return -1;
            N(c, n)->a = text;
            N(c, n)->b = count;
            append(c, PARENT, n);
        } else if (kind == OE_TOKEN_PI_TARGET) {
            uint32_t n = new_node(c, rec, N_PI);
            if (n == NIL) return -1;
            uint32_t name, count, text = 0, tcount = 0;
            if (read_name(c, pos + 1, &name, &count, &pos) < 0) return -1;
            if (pos < end && data[pos] == OE_TOKEN_PI_DATA) {
                if (utf16_run(c, pos + 1, &text, &tcount, &pos) < 0) return -1;
            }
            Node *pi = N(c, n);
            pi->a = name;
            pi->b = count;
            pi->c = text;
            pi->d = tcount;
            append(c, PARENT, n);
        } else if (kind == OE_TOKEN_TEMPLATE_INSTANCE) {
            uint32_t n;
            if (instance(c, rec, pos, end, depth, &n, &pos) < 0) return -1;
            append(c, PARENT, n);
        } else if (kind == OE_TOKEN_FRAGMENT_HEADER) {
            pos += 4;
        } else {
            return -1;
        }
    }
#undef PARENT
    if (top) return -1;
    *out_list = out.first;
    *after = pos;
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Text: UTF-16 decoded as Python's "utf-16-le" with "replace", then written as UTF-8.
 */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} Buf;

static int grow(Buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) { b->failed = 1; return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void put(Buf *b, const char *s, size_t n) {
    if (grow(b, n) < 0) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static inline void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

enum { ESC_NONE, ESC_TEXT, ESC_ATTR };

static void put_char(Buf *b, uint32_t cp, int esc) {
    char tmp[16];
    if (esc != ESC_NONE) {
        if (cp == '&') { put(b, "&amp;", 5); return; }
        if (cp == '<') { put(b, "&lt;", 4); return; }
        if (cp == '>') { put(b, "&gt;", 4); return; }
        if (esc == ESC_ATTR && cp == '\'') { put(b, "&apos;", 6); return; }
        if (esc == ESC_ATTR && cp == '"') { put(b, "&quot;", 6); return; }
        if (cp < 0x20 && cp != 0x09 && cp != 0x0A && cp != 0x0D) {
            int n = snprintf(tmp, sizeof tmp, "&#x%x;", (unsigned)cp);
            put(b, tmp, (size_t)n);
            return;
        }
    }
    if (grow(b, 4) < 0) return;
    char *o = b->p + b->len;
    if (cp < 0x80) { o[0] = (char)cp; b->len += 1; }
    else if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); b->len += 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        b->len += 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
        b->len += 4;
    }
}

/* ``data[0:n].decode("utf-16-le", "replace")`` (with ``.rstrip("\0")`` when strip), escaped. */
static uint8_t PLAIN[2][128]; /* [escaped?][unit]: an ASCII unit written as it is */

static void init_plain(void) {
    for (int u = 0; u < 128; u++) {
        PLAIN[0][u] = 1;
        PLAIN[1][u] = u >= 0x20 && u != '&' && u != '<' && u != '>' && u != '\'' && u != '"';
    }
}

static void put_utf16(Buf *b, const uint8_t *d, size_t n, int esc, int strip) {
    const uint8_t *plain = PLAIN[esc != ESC_NONE];
    if (strip && n % 2 == 0) {
        while (n >= 2 && d[n - 1] == 0 && d[n - 2] == 0) n -= 2;
    }
    size_t i = 0;
    while (i + 1 < n) {
        uint32_t u = rd16(d + i);
        if (u < 0x80 && plain[u]) {
            /* a run of characters written as they are */
            size_t room = (n - i) / 2;
            if (grow(b, room) < 0) return;
            char *o = b->p + b->len;
            do {
                *o++ = (char)u;
                i += 2;
                if (i + 1 >= n) break;
                u = rd16(d + i);
            } while (u < 0x80 && plain[u]);
            b->len = (size_t)(o - b->p);
            continue;
        }
        if (u >= 0xD800 && u < 0xDC00) {
            if (n - i < 4) { put_char(b, 0xFFFD, esc); return; } /* a high surrogate at the end takes the rest */
            uint32_t low = rd16(d + i + 2);
            if (low >= 0xDC00 && low < 0xE000) {
                put_char(b, 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00), esc);
                i += 4;
            } else {
                put_char(b, 0xFFFD, esc);
                i += 2;
            }
            continue;
        }
        put_char(b, u >= 0xDC00 && u < 0xE000 ? 0xFFFD : u, esc);
        i += 2;
    }
    if (i < n) put_char(b, 0xFFFD, esc);
}

/* The number of characters Python's decoding of ``count`` UTF-16 units gives. */
static int64_t utf16_chars(const uint8_t *d, uint32_t count) {
    int64_t chars = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t u = rd16(d + 2 * i);
        if (u >= 0xD800 && u < 0xDC00 && i + 1 < count) {
            uint32_t low = rd16(d + 2 * i + 2);
            if (low >= 0xDC00 && low < 0xE000) i++;
        }
        chars++;
    }
    return chars;
}

static void put_hex_bytes(Buf *b, const uint8_t *d, size_t n) {
    static const char digits[] = "0123456789ABCDEF";
    if (grow(b, 2 * n) < 0) return;
    for (size_t i = 0; i < n; i++) {
        b->p[b->len++] = digits[d[i] >> 4];
        b->p[b->len++] = digits[d[i] & 15];
    }
}

static void put_u64(Buf *b, uint64_t v) {
    char tmp[24];
    int i = 24;
    do { tmp[--i] = (char)('0' + v % 10); v /= 10; } while (v);
    put(b, tmp + i, (size_t)(24 - i));
}

static void put_i64(Buf *b, int64_t v) {
    if (v < 0) {
        put(b, "-", 1);
        put_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        put_u64(b, (uint64_t)v);
    }
}

static void put_hex64(Buf *b, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[18];
    int i = 18;
    do { tmp[--i] = digits[v & 15]; v >>= 4; } while (v);
    tmp[--i] = 'x';
    tmp[--i] = '0';
    put(b, tmp + i, (size_t)(18 - i));
}

static void put_padded(Buf *b, uint64_t v, int width) {
    char tmp[24];
    int i = 24;
    do { tmp[--i] = (char)('0' + v % 10); v /= 10; } while (v || 24 - i < width);
    put(b, tmp + i, (size_t)(24 - i));
}

static void put_hex_upper(Buf *b, uint64_t v, int width) {
    static const char digits[] = "0123456789ABCDEF";
    if (grow(b, (size_t)width) < 0) return;
    for (int i = width - 1; i >= 0; i--) {
        b->p[b->len + (size_t)i] = digits[v & 15];
        v >>= 4;
    }
    b->len += (size_t)width;
}

/* YYYY-MM-DDTHH:MM:SS.fffffffffZ */
static void put_time(Buf *b, uint64_t y, unsigned mo, unsigned d, unsigned h, unsigned mi, unsigned s, uint64_t ns) {
    put_padded(b, y, 4);
    put(b, "-", 1);
    put_padded(b, mo, 2);
    put(b, "-", 1);
    put_padded(b, d, 2);
    put(b, "T", 1);
    put_padded(b, h, 2);
    put(b, ":", 1);
    put_padded(b, mi, 2);
    put(b, ":", 1);
    put_padded(b, s, 2);
    put(b, ".", 1);
    put_padded(b, ns, 9);
    put(b, "Z", 1);
}


static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned)(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static int is_leap(unsigned y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* 0: written; 1: not this type's bytes (the caller writes them in hex); -1: left to Python. */
static int scalar_text(Buf *b, uint8_t type, const uint8_t *d, size_t n, int esc) {
    switch (type) {
    case OE_VT_STRING:
    case OE_VT_EVT_XML:
        put_utf16(b, d, n, esc, 1);
        return 0;
    case OE_VT_ANSI_STRING:
        while (n && d[n - 1] == 0) n--;
        for (size_t i = 0; i < n; i++) put_char(b, d[i], esc);
        return 0;
    case OE_VT_NULL:
        return 0;
    case OE_VT_BINARY:
        put_hex_bytes(b, d, n);
        return 0;
    case OE_VT_GUID:
        if (n != 16) return 1;
        put(b, "{", 1);
        put_hex_upper(b, rd32(d), 8);
        put(b, "-", 1);
        put_hex_upper(b, rd16(d + 4), 4);
        put(b, "-", 1);
        put_hex_upper(b, rd16(d + 6), 4);
        put(b, "-", 1);
        put_hex_bytes(b, d + 8, 2);
        put(b, "-", 1);
        put_hex_bytes(b, d + 10, 6);
        put(b, "}", 1);
        return 0;
    case OE_VT_SID: {
        if (n < 8 || n < 8 + 4 * (size_t)d[1]) return 1;
        uint64_t authority = 0;
        for (int i = 2; i < 8; i++) authority = authority << 8 | d[i];
        put(b, "S-", 2);
        put_u64(b, d[0]);
        put(b, "-", 1);
        put_u64(b, authority);
        for (unsigned i = 0; i < d[1]; i++) {
            put(b, "-", 1);
            put_u64(b, rd32(d + 8 + 4 * i));
        }
        return 0;
    }
    case OE_VT_SYSTEMTIME: {
        if (n != 16) return 1;
        unsigned y = rd16(d), mo = rd16(d + 2), day = rd16(d + 6), h = rd16(d + 8), mi = rd16(d + 10), s = rd16(d + 12),
                 ms = rd16(d + 14);
        static const unsigned dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (y < 1 || y > 9999 || mo < 1 || mo > 12 || day < 1 || day > dim[mo - 1] + (mo == 2 && is_leap(y)) || h > 23 ||
            mi > 59 || s > 59 || ms > 999)
            return 1;
        if (y < 1000) return -1; /* strftime's %Y of a short year differs by platform */
        put_time(b, y, mo, day, h, mi, s, ms * 1000000ull);
        return 0;
    }
    case OE_VT_SIZE_T:
    case OE_VT_EVT_HANDLE: {
        if (n != 4 && n != 8) return 1;
        uint64_t v = n == 4 ? rd32(d) : rd64(d);
        if (type == OE_VT_SIZE_T) put_hex64(b, v);
        else put_u64(b, v);
        return 0;
    }
    default:
        break;
    }
    size_t size = FIXED_SIZES[type];
    if (!size) return 1; /* an unknown type */
    if (n != size) return 1;
    switch (type) {
    case OE_VT_INT8: put_i64(b, (int8_t)d[0]); return 0;
    case OE_VT_UINT8: put_u64(b, d[0]); return 0;
    case OE_VT_INT16: put_i64(b, (int16_t)rd16(d)); return 0;
    case OE_VT_UINT16: put_u64(b, rd16(d)); return 0;
    case OE_VT_INT32: put_i64(b, (int32_t)rd32(d)); return 0;
    case OE_VT_UINT32: put_u64(b, rd32(d)); return 0;
    case OE_VT_INT64: put_i64(b, (int64_t)rd64(d)); return 0;
    case OE_VT_UINT64: put_u64(b, rd64(d)); return 0;
    case OE_VT_HEX_INT32: put_hex64(b, rd32(d)); return 0;
    case OE_VT_HEX_INT64: put_hex64(b, rd64(d)); return 0;
    case OE_VT_BOOL: puts_(b, rd32(d) ? "true" : "false"); return 0;
    case OE_VT_FILETIME: {
        uint64_t ticks = rd64(d);
        uint64_t seconds = ticks / 10000000u, rest = ticks % 10000000u;
        int64_t days = (int64_t)(seconds / 86400) + days_from_civil(1601, 1, 1);
        if (days > days_from_civil(9999, 12, 31)) return 1;
        int64_t y;
        unsigned m, dd;
        civil_from_days(days, &y, &m, &dd);
        unsigned sod = (unsigned)(seconds % 86400);
        put_time(b, (uint64_t)y, m, dd, sod / 3600, sod / 60 % 60, sod % 60, rest * 100);
        return 0;
    }
    default:
        return -1; /* reals: Python's float text */
    }
}

/* values.split_array: the items of an array value. 0 with items set, 1 when the bytes are not
 * such an array, -1 when left to Python. Items are (offset, size) pairs relative to d. */
typedef struct {
    uint32_t *at;
    size_t n, cap;
} Items;

static int item(Items *it, uint32_t off, uint32_t size) {
    if (it->n == it->cap) {
        size_t cap = it->cap ? it->cap * 2 : 16;
        uint32_t *p = PyMem_Realloc(it->at, cap * 2 * sizeof(uint32_t));
        if (!p) return -1;
        it->at = p;
        it->cap = cap;
    }
    it->at[2 * it->n] = off;
    it->at[2 * it->n + 1] = size;
    it->n++;
    return 0;
}

static int split_array(uint8_t type, const uint8_t *d, size_t n, Items *it) {
    uint8_t base = type & 0x7F;
    it->n = 0;
    if (base == OE_VT_STRING) {
        /* decoded, one trailing NUL dropped, split on NUL: a NUL unit is a NUL character unless
         * it is the odd byte's or a surrogate's; both decode to U+FFFD, never to NUL */
        size_t units_end = n;
        int odd = n % 2;
        if (!odd && n >= 2 && d[n - 1] == 0 && d[n - 2] == 0) units_end = n - 2;
        else if (odd) units_end = n; /* the odd byte ends with U+FFFD: nothing dropped */
        if (units_end == 0) return 0;
        size_t start = 0, i = 0;
        while (i + 1 < units_end) {
            if (rd16(d + i) == 0) {
                if (item(it, (uint32_t)start, (uint32_t)(i - start)) < 0) return -1;
                start = i + 2;
            }
            i += 2;
        }
        if (item(it, (uint32_t)start, (uint32_t)(units_end - start)) < 0) return -1;
        return 0;
    }
    if (base == OE_VT_ANSI_STRING) {
        size_t end = n && d[n - 1] == 0 ? n - 1 : n;
        if (end == 0) return 0;
        size_t start = 0;
        for (size_t i = 0; i < end; i++) {
            if (d[i] == 0) {
                if (item(it, (uint32_t)start, (uint32_t)(i - start)) < 0) return -1;
                start = i + 1;
            }
        }
        return item(it, (uint32_t)start, (uint32_t)(end - start)) < 0 ? -1 : 0;
    }
    if (base == OE_VT_SID) {
        size_t pos = 0;
        while (pos + 8 <= n) {
            size_t end = pos + 8 + 4 * (size_t)d[pos + 1];
            if (item(it, (uint32_t)pos, (uint32_t)((end < n ? end : n) - pos)) < 0) return -1;
            pos = end;
        }
        return pos != n ? 1 : 0;
    }
    size_t size = FIXED_SIZES[base];
    if (base == OE_VT_SIZE_T || base == OE_VT_EVT_HANDLE) size = n % 8 == 0 ? 8 : 4;
    if (!size) return 1;
    if (n % size) return 1;
    for (size_t i = 0; i < n; i += size)
        if (item(it, (uint32_t)i, (uint32_t)size) < 0) return -1;
    return 0;
}

/* render.value_text_lenient, escaped. 0 written, -1 left to Python. */
static int lenient_text(Buf *b, uint8_t type, const uint8_t *d, size_t n, int esc) {
    size_t mark = b->len;
    int rc;
    if (type & OE_VT_ARRAY) {
        Items it = {0};
        rc = split_array(type, d, n, &it);
        if (rc == 0) {
            for (size_t i = 0; i < it.n && rc == 0; i++) {
                if (i) put(b, ",", 1);
                rc = scalar_text(b, type & 0x7F, d + it.at[2 * i], it.at[2 * i + 1], esc);
            }
        }
        PyMem_Free(it.at);
    } else {
        rc = scalar_text(b, type, d, n, esc);
    }
    if (rc < 0) return -1;
    if (rc > 0) {
        b->len = mark;
        put_hex_bytes(b, d, n);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * The renderer: render.Renderer.xml. Template contents follow compile_template / _run, the rest
 * _nodes; -1 leaves the record's text to Python.
 */
typedef struct {
    Chunk *c;
    Buf *b;
} R;

static inline Val *lookup(Chunk *c, Node *sub, Node *inst) {
    if (!inst || sub->index >= inst->d) return NULL;
    Val *v = VAL(c, inst->c + sub->index);
    return v->type == OE_VT_NULL || v->size == 0 ? NULL : v;
}

/* A name as put_utf16 writes it, decoded once per node and then copied (up to NAMES_LIMIT bytes
 * of names per chunk: a chunk's own names take far less). */
#define NAMES_LIMIT (1u << 20)
static void put_name(R *r, Node *n) {
    Chunk *c = r->c;
    if (n->u8len == NIL) {
        if (c->names_len + 6 * (size_t)n->b > NAMES_LIMIT) { /* hostile names: written, not kept */
            put_utf16(r->b, c->data + n->a, 2 * (size_t)n->b, ESC_NONE, 0);
            return;
        }
        Buf once = {c->names, c->names_len, c->names_cap, 0};
        put_utf16(&once, c->data + n->a, 2 * (size_t)n->b, ESC_NONE, 0);
        c->names = once.p;
        c->names_cap = once.cap;
        if (once.failed) {
            put_utf16(r->b, c->data + n->a, 2 * (size_t)n->b, ESC_NONE, 0);
            return;
        }
        n->u8off = (uint32_t)c->names_len;
        n->u8len = (uint32_t)(once.len - c->names_len);
        c->names_len = once.len;
    }
    if (n->u8len) put(r->b, c->names + n->u8off, n->u8len);
}

static int nodes_generic(R *r, uint32_t list, Node *inst, int depth, int single_only);
static int run_template(R *r, Node *inst, int depth);

/* _value_xml: a present value. */
static int value_xml(R *r, Val *v, int depth, int esc) {
    if (v->type == OE_VT_BINXML) {
        if (v->nested == NIL && v->size) return -1;
        if (esc == ESC_ATTR) {
            Buf inner = {0};
            Buf *outer = r->b;
            r->b = &inner;
            int rc = nodes_generic(r, v->nested, NULL, depth + 1, 0);
            r->b = outer;
            if (rc == 0 && !inner.failed) {
                /* escape_attribute of the rendered text: its bytes are UTF-8, the escaped ones ASCII */
                for (size_t i = 0; i < inner.len; i++) {
                    unsigned char ch = (unsigned char)inner.p[i];
                    if (ch < 0x80) put_char(outer, ch, ESC_ATTR);
                    else put(outer, (const char *)&inner.p[i], 1);
                }
            }
            int failed = inner.failed;
            PyMem_Free(inner.p);
            return rc < 0 || failed ? -1 : 0;
        }
        return nodes_generic(r, v->nested, NULL, depth + 1, 0);
    }
    return lenient_text(r->b, v->type, r->c->data + v->off, v->size, esc);
}

static int parts_xml(R *r, uint32_t list, Node *inst, int depth, int esc, int one) {
    for (uint32_t ref = list; ref != NIL; ref = one ? NIL : N(r->c, ref)->next) {
        Node *p = N(r->c, ref);
        switch (p->kind) {
        case N_TEXT: put_utf16(r->b, r->c->data + p->a, 2 * (size_t)p->b, esc, 0); break;
        case N_SUBST: {
            Val *v = lookup(r->c, p, inst);
            if (v && value_xml(r, v, depth, esc) < 0) return -1;
            break;
        }
        case N_CHARREF: put(r->b, "&#", 2); put_u64(r->b, p->index); put(r->b, ";", 1); break;
        case N_ENTREF: put(r->b, "&", 1); put_name(r, p); put(r->b, ";", 1); break;
        default: return -1;
        }
    }
    return 0;
}

static int attribute_present(Chunk *c, Node *attr, Node *inst) {
    for (uint32_t ref = attr->first; ref != NIL; ref = N(c, ref)->next) {
        Node *p = N(c, ref);
        if (p->kind != N_SUBST || lookup(c, p, inst)) return 1;
    }
    return 0;
}

static int only_subst(Chunk *c, uint32_t list) { return list != NIL && N(c, list)->kind == N_SUBST && N(c, list)->next == NIL; }

/* The element whose content is one array value, once per item (``tag`` is written from mark). */
static int array_items(R *r, Node *el, Val *v, size_t mark, int *done) {
    Items it = {0};
    const uint8_t *d = r->c->data + v->off;
    int rc = split_array(v->type, d, v->size, &it);
    *done = 0;
    if (rc < 0) { PyMem_Free(it.at); return -1; }
    if (rc > 0 || it.n == 0) { PyMem_Free(it.at); return 0; }
    size_t tag_len = r->b->len - mark;
    char *tag = PyMem_Malloc(tag_len ? tag_len : 1);
    if (!tag) { PyMem_Free(it.at); return -1; }
    memcpy(tag, r->b->p + mark, tag_len);
    r->b->len = mark;
    for (size_t i = 0; i < it.n; i++) {
        put(r->b, tag, tag_len);
        size_t at = r->b->len;
        put(r->b, ">", 1);
        size_t text = r->b->len;
        if (lenient_text(r->b, v->type & 0x7F, d + it.at[2 * i], it.at[2 * i + 1], ESC_TEXT) < 0) {
            PyMem_Free(tag);
            PyMem_Free(it.at);
            return -1;
        }
        if (r->b->len == text) {
            r->b->len = at;
            put(r->b, "/>", 2);
        } else {
            put(r->b, "</", 2);
            put_name(r, el);
            put(r->b, ">", 1);
        }
    }
    PyMem_Free(tag);
    PyMem_Free(it.at);
    *done = 1;
    return 0;
}

/* One element of a template, as its compiled operations render it. */
static int compiled_list(R *r, uint32_t list, Node *inst, int depth);

static int compiled_element(R *r, Node *el, Node *inst, int depth) {
    Chunk *c = r->c;
    int single = only_subst(c, el->first);
    size_t mark = r->b->len;
    put(r->b, "<", 1);
    put_name(r, el);
    for (uint32_t ref = el->attrs; ref != NIL; ref = N(c, ref)->next) {
        Node *attr = N(c, ref);
        if (only_subst(c, attr->first)) {
            Val *v = lookup(c, N(c, attr->first), inst);
            if (v) {
                put(r->b, " ", 1);
                put_name(r, attr);
                put(r->b, "='", 2);
                if (value_xml(r, v, depth, ESC_ATTR) < 0) return -1;
                put(r->b, "'", 1);
            }
            continue;
        }
        int literal = 1;
        for (uint32_t p = attr->first; p != NIL; p = N(c, p)->next)
            if (N(c, p)->kind != N_TEXT) literal = 0;
        if (literal || attribute_present(c, attr, inst)) {
            put(r->b, " ", 1);
            put_name(r, attr);
            put(r->b, "='", 2);
            if (parts_xml(r, attr->first, inst, depth, ESC_ATTR, 0) < 0) return -1;
            put(r->b, "'", 1);
        }
    }
    if (single) {
        Node *sub = N(c, el->first);
        if (!inst || sub->index >= inst->d) { put(r->b, "/>", 2); return 0; }
        Val *v = VAL(c, inst->c + sub->index);
        if (!v->type || !v->size) { put(r->b, "/>", 2); return 0; }
        if (v->type & OE_VT_ARRAY && v->type != OE_VT_STRING && v->type != OE_VT_BINXML) {
            int done;
            if (array_items(r, el, v, mark, &done) < 0) return -1;
            if (done) return 0;
        }
        put(r->b, ">", 1);
        if (value_xml(r, v, depth, ESC_TEXT) < 0) return -1;
        put(r->b, "</", 2);
        put_name(r, el);
        put(r->b, ">", 1);
        return 0;
    }
    if (el->first != NIL) {
        put(r->b, ">", 1);
        if (compiled_list(r, el->first, inst, depth) < 0) return -1;
        put(r->b, "</", 2);
        put_name(r, el);
        put(r->b, ">", 1);
        return 0;
    }
    put(r->b, "/>", 2);
    return 0;
}

static int compiled_list(R *r, uint32_t list, Node *inst, int depth) {
    for (uint32_t ref = list; ref != NIL; ref = N(r->c, ref)->next) {
        Node *n = N(r->c, ref);
        if (n->kind == N_ELEMENT) {
            if (compiled_element(r, n, inst, depth) < 0) return -1;
        } else if (n->kind == N_TEXT) {
            put_utf16(r->b, r->c->data + n->a, 2 * (size_t)n->b, ESC_TEXT, 0);
        } else {
            if (nodes_generic(r, ref, inst, depth + 1, 1) < 0) return -1;
        }
    }
    return 0;
}

static int run_template(R *r, Node *inst, int depth) {
    if (depth > DEPTH_LIMIT) return -1;
    return compiled_list(r, r->c->templates[inst->index].nodes, inst, depth);
}

/* _open_tag and the generic element (reached with no instance in practice). */
static int generic_element(R *r, Node *el, Node *inst, int depth) {
    Chunk *c = r->c;
    size_t mark = r->b->len;
    put(r->b, "<", 1);
    put_name(r, el);
    for (uint32_t ref = el->attrs; ref != NIL; ref = N(c, ref)->next) {
        Node *attr = N(c, ref);
        if (only_subst(c, attr->first)) {
            Val *v = lookup(c, N(c, attr->first), inst);
            if (!v) continue;
        }
        if (attribute_present(c, attr, inst)) {
            put(r->b, " ", 1);
            put_name(r, attr);
            put(r->b, "='", 2);
            if (parts_xml(r, attr->first, inst, depth, ESC_ATTR, 0) < 0) return -1;
            put(r->b, "'", 1);
        }
    }
    if (only_subst(c, el->first)) {
        Val *v = lookup(c, N(c, el->first), inst);
        if (!v) { put(r->b, "/>", 2); return 0; }
        if (v->type != OE_VT_BINXML && v->type & OE_VT_ARRAY) {
            int done;
            if (array_items(r, el, v, mark, &done) < 0) return -1;
            if (done) return 0;
        }
        put(r->b, ">", 1);
        if (value_xml(r, v, depth, ESC_TEXT) < 0) return -1;
        put(r->b, "</", 2);
        put_name(r, el);
        put(r->b, ">", 1);
        return 0;
    }
    if (el->first != NIL) {
        put(r->b, ">", 1);
        size_t inner = r->b->len;
        if (nodes_generic(r, el->first, inst, depth + 1, 0) < 0) return -1;
        if (r->b->len == inner) return -1; /* Python's "/>" depends on what was appended, empty or not */
        put(r->b, "</", 2);
        put_name(r, el);
        put(r->b, ">", 1);
        return 0;
    }
    put(r->b, "/>", 2);
    return 0;
}

static int nodes_generic(R *r, uint32_t list, Node *inst, int depth, int single_only) {
    if (depth > DEPTH_LIMIT) return -1;
    for (uint32_t ref = list; ref != NIL; ref = single_only ? NIL : N(r->c, ref)->next) {
        Node *n = N(r->c, ref);
        switch (n->kind) {
        case N_ELEMENT:
            if (generic_element(r, n, inst, depth) < 0) return -1;
            break;
        case N_INSTANCE:
            if (run_template(r, n, depth + 1) < 0) return -1;
            break;
        case N_CDATA:
            put(r->b, "<![CDATA[", 9);
            put_utf16(r->b, r->c->data + n->a, 2 * (size_t)n->b, ESC_NONE, 0);
            put(r->b, "]]>", 3);
            break;
        case N_PI:
            put(r->b, "<?", 2);
            put_name(r, n);
            put(r->b, " ", 1);
            put_utf16(r->b, r->c->data + n->c, 2 * (size_t)n->d, ESC_NONE, 0);
            put(r->b, "?>", 2);
            break;
        default:
            if (parts_xml(r, ref, inst, depth, ESC_TEXT, 1) < 0) return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * The <System> facts: record.header_from_tree over the parsed nodes, for the common shape (each
 * fact one substitution of its usual type). Any other shape clears SYS_OK: the caller takes that
 * record's facts from the pure tree, so a fact here is always the value the pure code gives.
 */
enum { SI_EVENT_ID, SI_QUALIFIERS, SI_VERSION, SI_LEVEL, SI_TASK, SI_OPCODE, SI_KEYWORDS, SI_TIME,
       SI_RECORD_ID, SI_PID, SI_TID, SYS_INTS };
enum { SS_PROVIDER, SS_SOURCE, SS_CHANNEL, SS_COMPUTER, SS_USER, SYS_STRS };
enum { SG_PROVIDER, SG_ACTIVITY, SG_RELATED, SYS_GUIDS };
#define SYS_OK 1u
#define SYS_QUALIFIERS 2u /* the Qualifiers attribute is present */
#define SYS_GUID_BIT(g) (4u << (g))

typedef struct Sys_ {
    uint32_t flags;
    uint64_t ints[SYS_INTS];
    const uint8_t *guids[SYS_GUIDS];
    Val *strs[SYS_STRS]; /* NULL: absent */
    uint8_t guid_text[SYS_GUIDS][16]; /* GUIDs written as text */
    Val lit[8];          /* literal text taken as a string value (type LITERAL, no NULs stripped) */
    int nlit;
} Sys;
#define LITERAL 0xFE

static const char *const FACT_NAMES[] = {
    "Provider", "EventID", "Version", "Level", "Task", "Opcode", "Keywords", "TimeCreated", "EventRecordID",
    "Correlation", "Execution", "Channel", "Computer", "Security", /* System's children, then attributes */
    "Name", "Guid", "EventSourceName", "Qualifiers", "SystemTime", "ActivityID", "RelatedActivityID",
    "ProcessID", "ThreadID", "UserID", "System", "EventData", "UserData", "Data"};
#define N_FACT_NAMES (sizeof FACT_NAMES / sizeof *FACT_NAMES)
#define N_SYSTEM_CHILDREN 14

static int name_matches(Chunk *c, Node *n, const char *ascii) {
    size_t len = strlen(ascii);
    if (n->b != len || (uint64_t)n->a + 2 * (uint64_t)len > c->limit) return 0;
    const uint8_t *d = c->data + n->a;
    for (size_t i = 0; i < len; i++)
        if (d[2 * i] != (uint8_t)ascii[i] || d[2 * i + 1] != 0) return 0;
    return 1;
}

/* The node's name as an index of FACT_NAMES (-1: none), looked up once per node. */
static int name_code(Chunk *c, Node *n) {
    if (!n->fact) {
        n->fact = 0xFF;
        for (size_t k = 0; k < N_FACT_NAMES; k++)
            if (name_matches(c, n, FACT_NAMES[k])) { n->fact = (uint8_t)(k + 1); break; }
    }
    return n->fact == 0xFF ? -1 : n->fact - 1;
}

static int name_is(Chunk *c, Node *n, const char *ascii) {
    int code = name_code(c, n);
    return code >= 0 && strcmp(FACT_NAMES[code], ascii) == 0;
}

/* The one value of a parts list that is a single substitution: 1 with *v (NULL: null value), 0
 * for an empty list, -1 for any other shape. */
static int single_value(Chunk *c, uint32_t list, Node *inst, Val **v) {
    *v = NULL;
    if (list == NIL) return 0;
    Node *only = N(c, list);
    if (only->kind == N_TEXT && only->next == NIL && c->sys && c->sys->nlit < 8) {
        if ((uint64_t)only->a + 2 * (uint64_t)only->b > c->limit) return -1;
        Val *lit = &c->sys->lit[c->sys->nlit++];
        memset(lit, 0, sizeof *lit);
        lit->type = LITERAL;
        lit->off = only->a;
        lit->size = 2 * only->b;
        *v = lit;
        return 1;
    }
    if (!only_subst(c, list)) return -1;
    *v = lookup(c, N(c, list), inst);
    if (*v && ((*v)->type == OE_VT_BINXML || (*v)->type & OE_VT_ARRAY)) return -1;
    if (*v && (uint64_t)(*v)->off + (*v)->size > c->limit) return -1;
    return 1;
}

/* _int of a typed value: unsigned integers of their exact size, booleans; -1 for the rest. */
static int sys_int(Chunk *c, Val *v, uint64_t *out) {
    if (!v) { *out = 0; return 0; }
    const uint8_t *d = c->data + v->off;
    switch (v->type) {
    case OE_VT_UINT8: if (v->size != 1) return -1; *out = d[0]; return 0;
    case OE_VT_UINT16: if (v->size != 2) return -1; *out = rd16(d); return 0;
    case OE_VT_UINT32: case OE_VT_HEX_INT32: if (v->size != 4) return -1; *out = rd32(d); return 0;
    case OE_VT_UINT64: case OE_VT_HEX_INT64: if (v->size != 8) return -1; *out = rd64(d); return 0;
    case OE_VT_BOOL: if (v->size != 4) return -1; *out = rd32(d) != 0; return 0;
    default: return -1;
    }
}

static Node *attr_named(Chunk *c, Node *el, const char *name) {
    Node *found = NULL; /* a later attribute of the same name wins, as in the dict */
    for (uint32_t ref = el->attrs; ref != NIL; ref = N(c, ref)->next)
        if (name_is(c, N(c, ref), name)) found = N(c, ref);
    return found;
}

/* An attribute's value: 1 with *v present, 0 absent, -1 another shape. */
static int attr_value(Chunk *c, Node *el, Node *inst, const char *name, Val **v) {
    *v = NULL;
    Node *attr = attr_named(c, el, name);
    if (!attr) return 0;
    int rc = single_value(c, attr->first, inst, v);
    if (rc < 0) return -1;
    return *v ? 1 : 0;
}

static int attr_int(Chunk *c, Node *el, Node *inst, const char *name, uint64_t *out) {
    Val *v;
    if (attr_value(c, el, inst, name, &v) < 0) return -1;
    return sys_int(c, v, out);
}

static int content_int(Chunk *c, Node *el, Node *inst, uint64_t *out) {
    Val *v;
    if (single_value(c, el->first, inst, &v) < 0) return -1;
    return sys_int(c, v, out);
}

/* uuid.UUID of literal text in the canonical form ({} optional, 8-4-4-4-12 hex digits) as
 * bytes_le; -1 for any other text (the pure tree decides it). */
static int hexval(uint8_t lo, uint8_t hi) {
    if (hi) return -1;
    if (lo >= '0' && lo <= '9') return lo - '0';
    if (lo >= 'a' && lo <= 'f') return lo - 'a' + 10;
    if (lo >= 'A' && lo <= 'F') return lo - 'A' + 10;
    return -1;
}

static int literal_guid(const uint8_t *d, uint32_t units, uint8_t out[16]) {
    uint32_t start = 0, end = units;
    if (units == 38 && d[0] == '{' && !d[1] && d[74] == '}' && !d[75]) { start = 1; end = 37; }
    if (end - start != 36) return -1;
    uint8_t be[16];
    int k = 0;
    for (uint32_t i = start; i < end; i++) {
        uint32_t at = i - start;
        if (at == 8 || at == 13 || at == 18 || at == 23) {
            if (d[2 * i] != '-' || d[2 * i + 1]) return -1;
            continue;
        }
        int h = hexval(d[2 * i], d[2 * i + 1]);
        if (h < 0) return -1;
        if (k % 2 == 0) be[k / 2] = (uint8_t)(h << 4);
        else be[k / 2] |= (uint8_t)h;
        k++;
    }
    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    for (int i = 0; i < 16; i++) out[i] = be[order[i]];
    return 0;
}

static int attr_guid(Chunk *c, Node *el, Node *inst, const char *name, Sys *s, int g) {
    Val *v;
    int rc = attr_value(c, el, inst, name, &v);
    if (rc < 0) return -1;
    s->guids[g] = NULL;
    s->flags &= ~SYS_GUID_BIT(g);
    if (rc == 0) return 0;
    if (v->type == LITERAL) {
        if (literal_guid(c->data + v->off, v->size / 2, s->guid_text[g]) < 0) return -1;
        s->guids[g] = s->guid_text[g];
        s->flags |= SYS_GUID_BIT(g);
        return 0;
    }
    if (v->type != OE_VT_GUID || v->size != 16) return -1;
    s->guids[g] = c->data + v->off;
    s->flags |= SYS_GUID_BIT(g);
    return 0;
}

static int string_val(Val *v) { return (v->type == OE_VT_STRING && v->size % 2 == 0) || v->type == LITERAL; }

static int system_child(Chunk *c, Node *el, Node *inst, Sys *s) {
    Val *v;
    int rc;
    int code = name_code(c, el);
    if (code < 0 || code >= N_SYSTEM_CHILDREN) return 0;
    if (el->first != NIL && N(c, el->first)->next != NIL) return -1; /* mixed content, child elements */
    if (el->first != NIL && N(c, el->first)->kind != N_SUBST && N(c, el->first)->kind != N_TEXT) return -1;
    if (name_is(c, el, "Provider")) {
        if ((rc = attr_value(c, el, inst, "Name", &v)) < 0 || (rc && !string_val(v))) return -1;
        s->strs[SS_PROVIDER] = v;
        if (attr_guid(c, el, inst, "Guid", s, SG_PROVIDER) < 0) return -1;
        if ((rc = attr_value(c, el, inst, "EventSourceName", &v)) < 0 || (rc && !string_val(v))) return -1;
        s->strs[SS_SOURCE] = v;
    } else if (name_is(c, el, "EventID")) {
        if (content_int(c, el, inst, &s->ints[SI_EVENT_ID]) < 0) return -1;
        if ((rc = attr_value(c, el, inst, "Qualifiers", &v)) < 0) return -1;
        s->flags &= ~SYS_QUALIFIERS;
        s->ints[SI_QUALIFIERS] = 0;
        if (rc) {
            if (sys_int(c, v, &s->ints[SI_QUALIFIERS]) < 0) return -1;
            s->flags |= SYS_QUALIFIERS;
        }
    } else if (name_is(c, el, "Version")) {
        return content_int(c, el, inst, &s->ints[SI_VERSION]);
    } else if (name_is(c, el, "Level")) {
        return content_int(c, el, inst, &s->ints[SI_LEVEL]);
    } else if (name_is(c, el, "Task")) {
        return content_int(c, el, inst, &s->ints[SI_TASK]);
    } else if (name_is(c, el, "Opcode")) {
        return content_int(c, el, inst, &s->ints[SI_OPCODE]);
    } else if (name_is(c, el, "Keywords")) {
        return content_int(c, el, inst, &s->ints[SI_KEYWORDS]);
    } else if (name_is(c, el, "TimeCreated")) {
        if ((rc = attr_value(c, el, inst, "SystemTime", &v)) < 0) return -1;
        s->ints[SI_TIME] = 0;
        if (rc) {
            if (v->type != OE_VT_FILETIME || v->size != 8) return -1;
            s->ints[SI_TIME] = rd64(c->data + v->off);
        }
    } else if (name_is(c, el, "EventRecordID")) {
        return content_int(c, el, inst, &s->ints[SI_RECORD_ID]);
    } else if (name_is(c, el, "Correlation")) {
        if (attr_guid(c, el, inst, "ActivityID", s, SG_ACTIVITY) < 0) return -1;
        if (attr_guid(c, el, inst, "RelatedActivityID", s, SG_RELATED) < 0) return -1;
    } else if (name_is(c, el, "Execution")) {
        if (attr_int(c, el, inst, "ProcessID", &s->ints[SI_PID]) < 0) return -1;
        if (attr_int(c, el, inst, "ThreadID", &s->ints[SI_TID]) < 0) return -1;
    } else if (name_is(c, el, "Channel") || name_is(c, el, "Computer")) {
        if (single_value(c, el->first, inst, &v) < 0 || (v && !string_val(v))) return -1;
        s->strs[name_is(c, el, "Channel") ? SS_CHANNEL : SS_COMPUTER] = v;
    } else if (name_is(c, el, "Security")) {
        if ((rc = attr_value(c, el, inst, "UserID", &v)) < 0) return -1;
        if (rc && v->type != OE_VT_SID) return -1;
        if (rc) {
            /* sid_text's checks: a SID that does not fit is bytes in Python */
            if (v->size < 8 || v->size < 8 + 4 * (uint32_t)c->data[v->off + 1]) return -1;
        }
        s->strs[SS_USER] = v;
    }
    return 0;
}

/* What resolve makes of one node of a content list, for the readers of facts and fields: 1 an
 * element as it stands, 0 no element, -1 a shape left to the pure tree (a template instance or a
 * nested BinXml value: elements of their own; an element whose content is one array value: one
 * element per item). */
static int node_shape(Chunk *c, Node *n, Node *inst) {
    if (n->kind == N_ELEMENT) {
        if (only_subst(c, n->first)) {
            Val *v = lookup(c, N(c, n->first), inst);
            if (v && v->type & OE_VT_ARRAY) return -1;
        }
        return 1;
    }
    if (n->kind == N_INSTANCE) return -1;
    if (n->kind == N_SUBST) {
        Val *v = lookup(c, n, inst);
        if (v && v->type == OE_VT_BINXML) return -1;
    }
    return 0;
}

/* A list's first element (named name, any when NULL) as resolve makes it, in *el; -1 another
 * shape before it. */
static int first_element(Chunk *c, uint32_t list, Node *inst, const char *name, Node **el) {
    *el = NULL;
    for (uint32_t ref = list; ref != NIL; ref = N(c, ref)->next) {
        Node *n = N(c, ref);
        int shape = node_shape(c, n, inst);
        if (shape < 0) return -1;
        if (shape && (!name || name_is(c, n, name))) { *el = n; return 0; }
    }
    return 0;
}

/* The record's <Event> element and the instance whose values it takes: 0, or -1 for a shape
 * the pure tree decides (*event NULL: the record has no element). */
static int event_root(Chunk *c, uint32_t nodes, Node **inst, Node **event) {
    *inst = NULL;
    uint32_t list = nodes;
    if (nodes != NIL && N(c, nodes)->kind == N_INSTANCE) {
        *inst = N(c, nodes);
        list = c->templates[(*inst)->index].nodes;
    }
    if (first_element(c, list, *inst, NULL, event) < 0) return -1;
    if (!*event && *inst) return -1; /* the element would come after the instance */
    return 0;
}

static void system_facts(Chunk *c, Node *inst, Node *event, Sys *s) {
    memset(s, 0, sizeof *s);
    c->sys = s;
    Node *system = NULL;
    if (event && first_element(c, event->first, inst, "System", &system) < 0) return;
    for (uint32_t ref = system ? system->first : NIL; ref != NIL; ref = N(c, ref)->next) {
        Node *n = N(c, ref);
        int shape = node_shape(c, n, inst);
        if (shape < 0 || (shape && system_child(c, n, inst, s) < 0)) return;
    }
    s->flags |= SYS_OK;
}

/* ------------------------------------------------------------------------------------------
 * EventData as fields: record.properties_from_tree's names and values for the common shape (an
 * <EventData> of elements each holding one value, one literal text or nothing, named by a literal
 * Name attribute or by the element's name), as (type, chunk offset, size) per field. The names
 * are the template's: they are read once per EventData node of a template definition and kept as
 * a shape (Chunk.shapes). Any other shape (UserData, a substituted or repeated name, mixed or
 * nested content, an array, a record not made from a template) leaves the record's fields to the
 * pure tree.
 */
#define SHAPE_NONE (-1)
#define UNREAD 0xFFFFFFFFu
#define FIELD_ABSENT 0xFFu /* no value: None (text "") */

typedef struct {
    uint32_t *f; /* type, offset, size per field */
    uint32_t n, cap;
    int failed;
} Fields;

static int add_field(Fields *fs, uint32_t type, uint32_t off, uint32_t size) {
    if (fs->n == fs->cap) {
        uint32_t cap = fs->cap ? 2 * fs->cap : 64;
        uint32_t *p = PyMem_Realloc(fs->f, 3 * (size_t)cap * sizeof(uint32_t));
        if (!p) { fs->failed = 1; return -1; }
        fs->f = p;
        fs->cap = cap;
    }
    uint32_t *at = fs->f + 3 * (size_t)fs->n++;
    at[0] = type;
    at[1] = off;
    at[2] = size;
    return 0;
}

static PyObject *utf16_text(Chunk *c, uint32_t off, uint32_t units) {
    int order = -1;
    return PyUnicode_DecodeUTF16((const char *)c->data + off, 2 * (Py_ssize_t)units, "replace", &order);
}

/* A field's name: a Data element's literal Name ("" when empty or absent: numbered later), any
 * other element's own name; NULL with no exception for a name the pure tree decides. */
static PyObject *field_name(Chunk *c, Node *el, int user) {
    if (user || !name_is(c, el, "Data")) {
        if (user && el->b == 0) return NULL; /* no name to number */
        return utf16_text(c, el->a, el->b);
    }
    Node *attr = attr_named(c, el, "Name");
    if (!attr || attr->first == NIL) return PyUnicode_FromStringAndSize("", 0);
    Node *text = N(c, attr->first);
    if (text->kind != N_TEXT || text->next != NIL) return NULL;
    return utf16_text(c, text->a, text->b);
}

/* The shape of a template's EventData node (user: of the element inside UserData, whose fields
 * are named by their elements): its index in c->shapes, or SHAPE_NONE. */
static int data_shape(Chunk *c, Node *data, int user) {
    if (data->shape) return data->shape;
    PyObject *names = PyList_New(0), *seen = PySet_New(NULL);
    int shape = SHAPE_NONE, unnamed = 0;
    if (!names || !seen) goto done;
    for (uint32_t ref = data->first; ref != NIL; ref = N(c, ref)->next) {
        Node *el = N(c, ref);
        if (el->kind != N_ELEMENT) continue;
        PyObject *name = field_name(c, el, user);
        if (name && PyUnicode_GET_LENGTH(name) == 0) {
            Py_DECREF(name);
            name = PyUnicode_FromFormat("Data%d", ++unnamed);
        }
        if (!name) goto done;
        int dup = PySet_Contains(seen, name);
        if (dup || PySet_Add(seen, name) < 0 || PyList_Append(names, name) < 0) {
            Py_DECREF(name);
            goto done; /* a repeated name: the dict keeps the first place and the last value */
        }
        Py_DECREF(name);
    }
    PyObject *tuple = PyList_AsTuple(names);
    if (!tuple) goto done;
    if (PyList_Append(c->shapes, tuple) == 0) shape = (int)PyList_GET_SIZE(c->shapes);
    Py_DECREF(tuple);
done:
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) c->failed = 1;
        PyErr_Clear();
    }
    Py_XDECREF(names);
    Py_XDECREF(seen);
    data->shape = shape;
    return shape;
}

static int empty_shape(Chunk *c) {
    if (!c->empty_shape) {
        PyObject *none = PyTuple_New(0);
        c->empty_shape = none && PyList_Append(c->shapes, none) == 0 ? (int)PyList_GET_SIZE(c->shapes) : SHAPE_NONE;
        Py_XDECREF(none);
        PyErr_Clear();
    }
    return c->empty_shape;
}

/* The first element of a content list as resolve flattens it (the nodes of nested BinXml values
 * and of template instances in their place; sections 1: the first EventData, 2: UserData): 1 with
 * *el and the instance whose values it takes in *el_inst, 0 for none, -1 for a shape the pure
 * tree decides. */
static int find_element(Chunk *c, uint32_t list, Node *inst, int sections, int depth, Node **el, Node **el_inst) {
    if (depth > DEPTH_LIMIT) return -1;
    for (uint32_t ref = list; ref != NIL; ref = N(c, ref)->next) {
        Node *n = N(c, ref);
        int rc = 0;
        if (n->kind == N_ELEMENT) {
            if (sections && !name_is(c, n, sections == 1 ? "EventData" : "UserData")) continue;
            if (node_shape(c, n, inst) < 0) return -1;
            *el = n;
            *el_inst = inst;
            return 1;
        } else if (n->kind == N_INSTANCE) {
            rc = find_element(c, c->templates[n->index].nodes, n, sections, depth + 1, el, el_inst);
        } else if (n->kind == N_SUBST) {
            Val *v = lookup(c, n, inst);
            if (v && v->type == OE_VT_BINXML) {
                if (v->nested == NIL) return -1;
                rc = find_element(c, v->nested, NULL, sections, depth + 1, el, el_inst);
            }
        }
        if (rc) return rc;
    }
    return 0;
}


/* A value's items as _array_items splits them: 0 with it filled, -1 for a value the pure code
 * renders whole (no items, or bytes that do not split), -2 out of memory. */
static int array_of(Chunk *c, Val *v, Items *it) {
    int rc = split_array(v->type, c->data + v->off, v->size, it);
    if (rc < 0) { c->failed = 1; return -2; }
    return rc > 0 || it->n == 0 ? -1 : 0;
}

/* The names of one record's fields (EventData holding array values, one element per item, or
 * nodes of the record's own): looked up in c->shape_ids, added when new; SHAPE_NONE for names the
 * pure tree decides. */
static int record_shape(Chunk *c, Node *data, Node *inst, int user) {
    PyObject *names = PyList_New(0), *seen = PySet_New(NULL), *tuple = NULL;
    Items it = {0};
    int shape = SHAPE_NONE, unnamed = 0;
    if (!names || !seen) goto done;
    for (uint32_t ref = data->first; ref != NIL; ref = N(c, ref)->next) {
        Node *el = N(c, ref);
        if (el->kind != N_ELEMENT) continue;
        size_t items = 1;
        if (only_subst(c, el->first)) {
            Val *v = lookup(c, N(c, el->first), inst);
            if (v && v->type & OE_VT_ARRAY) {
                if (array_of(c, v, &it) < 0) goto done;
                items = it.n;
            }
        }
        PyObject *name = field_name(c, el, user);
        if (!name) goto done;
        for (size_t k = 0; k < items; k++) {
            PyObject *one = name;
            if (PyUnicode_GET_LENGTH(name) == 0) one = PyUnicode_FromFormat("Data%d", ++unnamed);
            else Py_INCREF(one);
            int dup = one ? PySet_Contains(seen, one) : -1;
            if (dup || PySet_Add(seen, one) < 0 || PyList_Append(names, one) < 0) {
                Py_XDECREF(one);
                Py_DECREF(name);
                goto done;
            }
            Py_DECREF(one);
        }
        Py_DECREF(name);
    }
    tuple = PyList_AsTuple(names);
    if (!tuple) goto done;
    PyObject *known = PyDict_GetItemWithError(c->shape_ids, tuple);
    if (known) {
        shape = (int)PyLong_AsLong(known);
    } else if (!PyErr_Occurred() && PyList_Append(c->shapes, tuple) == 0) {
        PyObject *number = PyLong_FromSsize_t(PyList_GET_SIZE(c->shapes));
        if (number && PyDict_SetItem(c->shape_ids, tuple, number) == 0) shape = (int)PyList_GET_SIZE(c->shapes);
        Py_XDECREF(number);
    }
done:
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) c->failed = 1;
        PyErr_Clear();
    }
    PyMem_Free(it.at);
    Py_XDECREF(tuple);
    Py_XDECREF(names);
    Py_XDECREF(seen);
    return shape;
}

/* The record's EventData fields appended to fs: the shape's index, or UNREAD (fs unchanged). */
static uint32_t event_data(Chunk *c, Node *inst, Node *event, Fields *fs) {
    Node *data = NULL;
    if (!event) return UNREAD;
    Node *event_inst = inst;
    int found = find_element(c, event->first, event_inst, 1, 0, &data, &inst), user = 0;
    if (found == 0) found = user = find_element(c, event->first, event_inst, 2, 0, &data, &inst);
    if (found < 0) return UNREAD;
    if (user) { /* the fields of its first element */
        found = find_element(c, data->first, inst, 0, 0, &data, &inst);
        if (found < 0) return UNREAD;
    }
    if (!found) data = event; /* no EventData (or nothing in UserData): no fields, the shape of no names */
    Arena *chunk = &c->arena[0];
    /* names read once per template EventData node; a record's own nodes (a nested BinXml value
     * not made from a template) are named record by record, as are arrays and UserData's fields
     * (a template's element may be one record's EventData and another's UserData element) */
    int arrays = user || data < chunk->nodes || data >= chunk->nodes + chunk->n;
    uint32_t mark = fs->n;
    Items it = {0};
    if (data != event) {
        for (uint32_t ref = data->first; ref != NIL; ref = N(c, ref)->next) {
            Node *el = N(c, ref);
            if (el->kind != N_ELEMENT) {
                if (node_shape(c, el, inst) < 0) goto other;
                continue;
            }
            Node *only = el->first == NIL ? NULL : N(c, el->first);
            if (only && only->next != NIL) goto other; /* mixed content, child elements */
            int rc;
            if (!only) {
                rc = add_field(fs, FIELD_ABSENT, 0, 0);
            } else if (only->kind == N_TEXT) {
                if ((uint64_t)only->a + 2 * (uint64_t)only->b > c->limit) goto other;
                rc = add_field(fs, LITERAL, only->a, 2 * only->b);
            } else if (only->kind == N_SUBST) {
                Val *v = lookup(c, only, inst);
                if (!v) {
                    rc = add_field(fs, FIELD_ABSENT, 0, 0);
                } else if (v->type == OE_VT_BINXML || (uint64_t)v->off + v->size > c->limit) {
                    goto other;
                } else if (v->type & OE_VT_ARRAY) {
                    /* one element per item; an item of zero bytes only holds nothing */
                    if (array_of(c, v, &it) < 0) goto other;
                    arrays = 1;
                    rc = 0;
                    for (size_t k = 0; k < it.n && rc == 0; k++) {
                        uint32_t off = v->off + it.at[2 * k], size = it.at[2 * k + 1], zero = 1;
                        for (uint32_t j = 0; j < size && zero; j++) zero = c->data[off + j] == 0;
                        rc = zero ? add_field(fs, FIELD_ABSENT, 0, 0) : add_field(fs, v->type & 0x7F, off, size);
                    }
                } else {
                    rc = add_field(fs, v->type, v->off, v->size);
                }
            } else {
                goto other;
            }
            if (rc < 0) goto other;
        }
    }
    int shape = data == event ? empty_shape(c) : arrays ? record_shape(c, data, inst, user) : data_shape(c, data, user);
    if (shape == SHAPE_NONE) goto other;
    if ((uint32_t)PyTuple_GET_SIZE(PyList_GET_ITEM(c->shapes, shape - 1)) != fs->n - mark) goto other;
    PyMem_Free(it.at);
    return (uint32_t)(shape - 1);
other:
    PyMem_Free(it.at);
    fs->n = mark;
    return UNREAD;
}

/* The facts' Python strings: _utf16 (decoded with replacement, trailing NULs stripped). */
static PyObject *sys_string(Chunk *c, Val *v, PyObject *absent) {
    if (!v) { Py_INCREF(absent); return absent; }
    const uint8_t *d = c->data + v->off;
    uint32_t n = v->size;
    if (v->type != LITERAL)
        while (n >= 2 && d[n - 2] == 0 && d[n - 1] == 0) n -= 2;
    int order = -1;
    return PyUnicode_DecodeUTF16((const char *)d, n, "replace", &order);
}

static PyObject *sid_string(Chunk *c, Val *v) {
    if (!v) Py_RETURN_NONE;
    const uint8_t *d = c->data + v->off;
    char text[16 + 21 + 255 * 11];
    uint64_t authority = 0;
    for (int i = 2; i < 8; i++) authority = authority << 8 | d[i];
    int len = snprintf(text, sizeof text, "S-%u-%llu", d[0], (unsigned long long)authority);
    for (uint32_t i = 0; i < d[1]; i++)
        len += snprintf(text + len, sizeof text - len, "-%u", rd32(d + 8 + 4 * i));
    return PyUnicode_FromStringAndSize(text, len);
}

/* A column of strings that reuses the previous row's object when its bytes repeat. */
typedef struct { const uint8_t *d; uint32_t n; int set, type; PyObject *obj; } Last;

static int append_string(PyObject *list, Chunk *c, Val *v, int kind, Last *last) {
    const uint8_t *d = v ? c->data + v->off : NULL;
    uint32_t n = v ? v->size : 0;
    PyObject *obj;
    int type = v ? v->type : -1;
    if (last->set && last->type == type && last->n == n && (n == 0 || memcmp(last->d, d, n) == 0)) {
        obj = last->obj;
        Py_INCREF(obj);
    } else {
        if (kind == 2) obj = sid_string(c, v);
        else if (v || kind == 1) obj = sys_string(c, v, Py_None);
        else obj = PyUnicode_FromStringAndSize("", 0);
        if (!obj) return -1;
        last->d = d;
        last->n = n;
        last->set = 1;
        last->type = type;
        last->obj = obj; /* borrowed: the list keeps it */
    }
    int rc = PyList_Append(list, obj);
    Py_DECREF(obj);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * The expansion bound: render.check_expansion. -1 when the pure code raises (or may).
 */
typedef struct {
    Chunk *c;
    int64_t limit;
} X;

static int fragment_cost(X *x, uint32_t list, int depth, int64_t *cost);
static int summary_cost(X *x, uint32_t list, Node *inst, int depth, int64_t *total);

static int value_cost(X *x, Node *inst, uint32_t index, int depth, int64_t *cost) {
    Val *v = VAL(x->c, inst->c + index);
    if (v->type == OE_VT_BINXML && v->size) {
        if (v->nested == NIL) { *cost = 0; return 0; }
        if (v->gen == x->c->gen) { *cost = v->cost; return 0; }
        if (fragment_cost(x, v->nested, depth + 1, cost) < 0) return -1;
        v->gen = x->c->gen;
        v->cost = *cost;
        return 0;
    }
    *cost = OE_CHARS_PER_BYTE * (int64_t)v->size + 2;
    return 0;
}

static int slot(X *x, Node *sub, Node *inst, int depth, int64_t *total) {
    if (!inst || sub->index >= inst->d) return 0;
    int64_t cost;
    if (value_cost(x, inst, sub->index, depth, &cost) < 0) return -1;
    *total += cost;
    return 0;
}

static int64_t name_chars(Chunk *c, Node *n) {
    if (n->chars < 0) n->chars = (int32_t)utf16_chars(c->data + n->a, n->b);
    return n->chars;
}

/* _summarize's walk of parts (attribute values and loose content), adding to *total. */
static int part_cost(X *x, Node *p, Node *inst, int depth, int64_t *literal, int64_t *total) {
    switch (p->kind) {
    case N_SUBST: return slot(x, p, inst, depth, total);
    case N_TEXT: *literal += 6 * name_chars(x->c, p); return 0;
    case N_CDATA: *literal += utf16_chars(x->c->data + p->a, p->b) + 12; return 0;
    case N_PI: *literal += name_chars(x->c, p) + utf16_chars(x->c->data + p->c, p->d) + 5; return 0;
    default: *literal += 16; return 0;
    }
}

static int element_cost(X *x, Node *el, Node *inst, int depth, int64_t *literal, int64_t *total) {
    *literal += 2 * name_chars(x->c, el) + 5;
    for (uint32_t ref = el->attrs; ref != NIL; ref = N(x->c, ref)->next) {
        Node *attr = N(x->c, ref);
        *literal += name_chars(x->c, attr) + 4;
        for (uint32_t p = attr->first; p != NIL; p = N(x->c, p)->next)
            if (part_cost(x, N(x->c, p), inst, depth, literal, total) < 0) return -1;
    }
    return 0;
}

/* summary(_summarize(list), inst, depth) without its final check; literal and the rest apart. */
static int walk_cost(X *x, uint32_t list, Node *inst, int depth, int64_t *literal, int64_t *total) {
    Chunk *c = x->c;
    for (uint32_t ref = list; ref != NIL; ref = N(c, ref)->next) {
        Node *n = N(c, ref);
        if (n->kind == N_ELEMENT) {
            if (only_subst(c, n->first)) {
                int64_t el_literal = 0, el_rest = 0;
                if (element_cost(x, n, inst, depth, &el_literal, &el_rest) < 0) return -1;
                *literal += el_literal;
                *total += el_rest;
                Node *sub = N(c, n->first);
                if (slot(x, sub, inst, depth, total) < 0) return -1;
                if (inst && sub->index < inst->d) {
                    Val *v = VAL(c, inst->c + sub->index);
                    if (v->type & OE_VT_ARRAY) {
                        uint8_t base = v->type & 0x7F;
                        int64_t per = base == OE_VT_STRING ? 2 : (FIXED_SIZES[base] ? FIXED_SIZES[base] : 1);
                        int64_t items = v->size / per;
                        int64_t element = el_literal + el_rest;
                        if (element > x->limit) return -1;
                        *total += items * element;
                    }
                }
            } else {
                if (element_cost(x, n, inst, depth, literal, total) < 0) return -1;
                if (walk_cost(x, n->first, inst, depth, literal, total) < 0) return -1;
            }
        } else if (n->kind == N_INSTANCE) {
            int64_t cost;
            if (summary_cost(x, c->templates[n->index].nodes, n, depth + 1, &cost) < 0) return -1;
            *total += cost;
        } else {
            if (part_cost(x, n, inst, depth, literal, total) < 0) return -1;
        }
    }
    return 0;
}

static int summary_cost(X *x, uint32_t list, Node *inst, int depth, int64_t *total) {
    if (depth > DEPTH_LIMIT) return -1;
    int64_t literal = 0, rest = 0;
    if (walk_cost(x, list, inst, depth, &literal, &rest) < 0) return -1;
    *total = literal + rest;
    return *total > x->limit ? -1 : 0;
}

static int fragment_cost(X *x, uint32_t list, int depth, int64_t *cost) {
    if (depth > DEPTH_LIMIT) return -1;
    return summary_cost(x, list, NULL, depth, cost);
}

/* The template's own summary: its literal text, whether it holds instances, its array slots. */
static void summarize_template(Chunk *c, Template *t, uint32_t list) {
    for (uint32_t ref = list; ref != NIL; ref = N(c, ref)->next) {
        Node *n = N(c, ref);
        if (n->kind == N_ELEMENT) {
            t->literal += 2 * name_chars(c, n) + 5;
            for (uint32_t a = n->attrs; a != NIL; a = N(c, a)->next) {
                Node *attr = N(c, a);
                t->literal += name_chars(c, attr) + 4;
                for (uint32_t p = attr->first; p != NIL; p = N(c, p)->next) {
                    Node *part = N(c, p);
                    if (part->kind == N_TEXT) t->literal += 6 * utf16_chars(c->data + part->a, part->b);
                    else if (part->kind != N_SUBST) t->literal += 16;
                }
            }
            if (only_subst(c, n->first)) {
                uint32_t *p = PyMem_Realloc(t->array_slots, (t->n_array_slots + 1) * sizeof(uint32_t));
                if (!p) { c->failed = 1; return; }
                t->array_slots = p;
                t->array_slots[t->n_array_slots++] = N(c, n->first)->index;
            } else {
                summarize_template(c, t, n->first);
            }
        } else if (n->kind == N_INSTANCE) {
            t->has_instances = 1;
        } else if (n->kind == N_TEXT) {
            t->literal += 6 * utf16_chars(c->data + n->a, n->b);
        } else if (n->kind == N_CDATA) {
            t->literal += utf16_chars(c->data + n->a, n->b) + 12;
        } else if (n->kind == N_PI) {
            t->literal += name_chars(c, n) + utf16_chars(c->data + n->c, n->d) + 5;
        } else if (n->kind != N_SUBST) {
            t->literal += 16;
        }
    }
}

static int check_expansion(Chunk *c, uint32_t nodes) {
    if (nodes != NIL && N(c, nodes)->next == NIL && N(c, nodes)->kind == N_INSTANCE) {
        Node *inst = N(c, nodes);
        int nested = 0;
        for (uint32_t i = 0; i < inst->d; i++) {
            Val *v = VAL(c, inst->c + i);
            if (v->type == OE_VT_BINXML && v->size) nested = 1;
        }
        if (!nested) {
            Template *t = &c->templates[inst->index];
            if (!t->summarized) {
                summarize_template(c, t, t->nodes);
                if (c->failed) return -1;
                t->summarized = 1;
            }
            if (!t->has_instances && t->literal <= OE_MAX_EXPANSION) {
                int arrays = 0;
                for (uint32_t i = 0; i < t->n_array_slots; i++) {
                    uint32_t index = t->array_slots[i];
                    if (index < inst->d && VAL(c, inst->c + index)->type & OE_VT_ARRAY) arrays = 1;
                }
                if (!arrays) return 0;
            }
        }
    }
    X x = {c, OE_MAX_EXPANSION};
    c->gen++;
    int64_t cost;
    return fragment_cost(&x, nodes, 0, &cost);
}

/* ------------------------------------------------------------------------------------------
 * The Chunk type.
 */
static void chunk_dealloc(Chunk *c) {
    for (int i = 0; i < 2; i++) {
        PyMem_Free(c->arena[i].nodes);
        PyMem_Free(c->arena[i].vals);
    }
    for (uint32_t i = 0; i < c->nt; i++) PyMem_Free(c->templates[i].array_slots);
    PyMem_Free(c->templates);
    PyMem_Free(c->slot_key);
    PyMem_Free(c->slot_value);
    PyMem_Free(c->names);
    Py_XDECREF(c->shapes);
    Py_XDECREF(c->shape_ids);
    Py_XDECREF(c->bytes);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *chunk_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *bytes;
    if (!PyArg_ParseTuple(args, "S:Chunk", &bytes)) return NULL;
    if (PyBytes_GET_SIZE(bytes) > OE_EVTX_CHUNK_SIZE) {
        PyErr_SetString(PyExc_ValueError, "a chunk is at most 64 KiB");
        return NULL;
    }
    Chunk *c = (Chunk *)type->tp_alloc(type, 0);
    if (!c) return NULL;
    Py_INCREF(bytes);
    c->bytes = bytes;
    c->data = (const uint8_t *)PyBytes_AS_STRING(bytes);
    c->limit = (uint32_t)PyBytes_GET_SIZE(bytes);
    c->shapes = PyList_New(0);
    c->shape_ids = PyDict_New();
    if (!c->shapes || !c->shape_ids) {
        Py_DECREF(c);
        return NULL;
    }
    c->slots = 64;
    c->slot_key = PyMem_Calloc(c->slots, sizeof(uint32_t));
    c->slot_value = PyMem_Calloc(c->slots, sizeof(int32_t));
    if (!c->slot_key || !c->slot_value) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    return (PyObject *)c;
}

/* 1 and *after, *xml (a new reference: the text, or None) when accepted; 0 when left to the pure
 * parser; -1 with an exception set. With sys, the record's <System> facts; with fs, its EventData
 * fields appended to fs and their shape in *shape (UNREAD: the pure tree's). */
static int record_core(Chunk *c, Buf *b, unsigned long start, unsigned long end, unsigned long *after_, PyObject **xml, Sys *sys,
                       Fields *fs, uint32_t *shape) {
    if (start > c->limit || end > 0xFFFFFFFFul) return 0;
    c->arena[1].n = 0;
    c->arena[1].nv = 0;
    c->work = 0;
    uint32_t nodes, after;
    int rc = parse(c, 1, (uint32_t)start, (uint32_t)end, 0, 0, &nodes, &after);
    c->work = 0;
    if (rc == 0) rc = check_expansion(c, nodes);
    if (c->failed) { PyErr_NoMemory(); return -1; }
    if (rc < 0) return 0;
    b->len = 0; /* the caller's buffer, kept from record to record */
    b->failed = 0;
    R r = {c, b};
    if (nodes_generic(&r, nodes, NULL, 0, 0) < 0 || b->failed) {
        *xml = Py_None;
        Py_INCREF(Py_None);
    } else {
        *xml = PyUnicode_DecodeUTF8(b->p ? b->p : "", (Py_ssize_t)b->len, "strict");
    }
    if (!*xml) return -1;
    Node *inst = NULL, *event = NULL;
    int rooted = *xml != Py_None && (sys || fs) && event_root(c, nodes, &inst, &event) == 0;
    if (sys) {
        if (rooted) system_facts(c, inst, event, sys);
        else memset(sys, 0, sizeof *sys);
        c->sys = NULL;
    }
    if (fs) {
        *shape = rooted ? event_data(c, inst, event, fs) : UNREAD;
        if (c->failed || fs->failed) {
            Py_DECREF(*xml);
            PyErr_NoMemory();
            return -1;
        }
    }
    *after_ = after;
    return 1;
}

static PyObject *chunk_record(Chunk *c, PyObject *args) {
    unsigned long start, end, after;
    PyObject *xml;
    if (!PyArg_ParseTuple(args, "kk:record", &start, &end)) return NULL;
    Buf b = {0};
    int rc = record_core(c, &b, start, end, &after, &xml, NULL, NULL, NULL);
    PyMem_Free(b.p);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(kN)", after, xml);
}

/* The common records of a chunk from pos, as EvtxReader._walk takes them: framed, before the
 * free-space offset or continuing the ids, their size repeated at their end, accepted. It stops
 * at the first other one (the caller's own walk takes it): "rejected" says the twin was asked
 * and left that record to the pure parser. The records come back as columns: their positions
 * and sizes (u32), ids and written times (u64) packed in bytes, their XML texts in a list, and
 * the ids the chunk header's first_id..last_id range does not cover. With system, the <System>
 * facts (system_facts): SYS_INTS u64 per record, u32 flags (SYS_OK clear: the caller asks the
 * pure tree), three 16-byte GUIDs, and five lists of strings (None on a row without SYS_OK);
 * else None. With data, the EventData fields (event_data): a u32 shape per record (UNREAD: the
 * pure tree's), the u32 index of its first field, the fields (u32 type, offset, size each) and
 * the chunk's shapes (a list of tuples of names, shared from call to call); else None. */
static int grow_bytes(PyObject **b, Py_ssize_t need) {
    Py_ssize_t have = PyBytes_GET_SIZE(*b);
    if (need <= have) return 0;
    Py_ssize_t size = have;
    while (size < need) size *= 2;
    return _PyBytes_Resize(b, size);
}

static int put_bytes(PyObject **b, Py_ssize_t at, const void *p, Py_ssize_t n) {
    if (grow_bytes(b, at + n) < 0) return -1;
    memcpy(PyBytes_AS_STRING(*b) + at, p, (size_t)n);
    return 0;
}

enum { C_POS, C_SIZE, C_ID, C_WRITTEN, C_SYS_INTS, C_SYS_FLAGS, C_SYS_GUIDS, C_SHAPE, C_START, N_COLS };

static PyObject *chunk_walk(Chunk *c, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"pos", "free", "first_id", "last_id", "previous_id", "system", "data", NULL};
    unsigned long pos, free_;
    unsigned long long first_id, last_id;
    PyObject *previous;
    int want_system = 1, want_data = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "kkKKO|pp:walk", keywords, &pos, &free_, &first_id, &last_id, &previous,
                                     &want_system, &want_data))
        return NULL;
    int have_previous = previous != Py_None;
    unsigned long long previous_id = 0;
    if (have_previous) {
        previous_id = PyLong_AsUnsignedLongLong(previous);
        if (previous_id == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    }
    static const Py_ssize_t width[N_COLS] = {4, 4, 8, 8, 8 * SYS_INTS, 4, 16 * SYS_GUIDS, 4, 4};
    PyObject *xmls = PyList_New(0), *outside = PyList_New(0), *fields = NULL;
    PyObject *col[N_COLS] = {0};
    PyObject *slist[SYS_STRS] = {0};
    static const int skind[SYS_STRS] = {0, 1, 0, 0, 2};
    Last last[SYS_STRS];
    memset(last, 0, sizeof last);
    Py_ssize_t n = 0;
    int rejected = 0;
    Buf b = {0};
    Sys sys;
    Fields fs = {0};
    const uint8_t *data = c->data;
    uint64_t limit = c->limit;
    if (!xmls || !outside) goto fail;
    for (int k = 0; k < N_COLS; k++) {
        if ((k >= C_SYS_INTS && k <= C_SYS_GUIDS && !want_system) || (k >= C_SHAPE && !want_data)) continue;
        /* never the shared empty bytes: only a bytes of its own may be resized */
        if (!(col[k] = PyBytes_FromStringAndSize(NULL, width[k] * 64))) goto fail;
    }
    for (int i = 0; want_system && i < SYS_STRS; i++)
        if (!(slist[i] = PyList_New(0))) goto fail;
    while ((uint64_t)pos + OE_EVTX_MIN_RECORD_SIZE <= OE_EVTX_CHUNK_SIZE && (uint64_t)pos + OE_EVTX_MIN_RECORD_SIZE <= limit) {
        if (memcmp(data + pos, OE_EVTX_RECORD_MAGIC, 4) != 0) break;
        uint32_t size = rd32(data + pos + 4);
        if (size < OE_EVTX_MIN_RECORD_SIZE || (uint64_t)pos + size > OE_EVTX_CHUNK_SIZE || (uint64_t)pos + size > limit) break;
        uint64_t record_id = rd64(data + pos + 8);
        uint64_t written = rd64(data + pos + 16);
        int continuing = have_previous && record_id == previous_id + 1;
        if (pos >= free_ && !continuing) break;
        if (rd32(data + pos + size - 4) != size) break; /* torn: the caller's walk decides */
        unsigned long after;
        PyObject *xml;
        uint32_t shape = UNREAD, start = fs.n;
        int rc = record_core(c, &b, pos + OE_EVTX_RECORD_HEADER_SIZE, pos + size - 4, &after, &xml, want_system ? &sys : NULL,
                             want_data ? &fs : NULL, &shape);
        if (rc < 0) goto fail;
        if (rc == 0) {
            rejected = 1;
            break;
        }
        rc = PyList_Append(xmls, xml);
        Py_DECREF(xml);
        if (rc < 0) goto fail;
        if (!(first_id <= record_id && record_id <= last_id)) {
            PyObject *id = PyLong_FromUnsignedLongLong(record_id);
            if (!id || PyList_Append(outside, id) < 0) {
                Py_XDECREF(id);
                goto fail;
            }
            Py_DECREF(id);
        }
        uint32_t pos32 = (uint32_t)pos;
        if (put_bytes(&col[C_POS], 4 * n, &pos32, 4) < 0 || put_bytes(&col[C_SIZE], 4 * n, &size, 4) < 0 ||
            put_bytes(&col[C_ID], 8 * n, &record_id, 8) < 0 || put_bytes(&col[C_WRITTEN], 8 * n, &written, 8) < 0)
            goto fail;
        if (want_system) {
            if (put_bytes(&col[C_SYS_INTS], width[C_SYS_INTS] * n, sys.ints, width[C_SYS_INTS]) < 0 ||
                put_bytes(&col[C_SYS_FLAGS], 4 * n, &sys.flags, 4) < 0 || grow_bytes(&col[C_SYS_GUIDS], width[C_SYS_GUIDS] * (n + 1)) < 0)
                goto fail;
            for (int g = 0; g < SYS_GUIDS; g++) {
                char *at = PyBytes_AS_STRING(col[C_SYS_GUIDS]) + 16 * (SYS_GUIDS * n + g);
                if (sys.guids[g]) memcpy(at, sys.guids[g], 16);
                else memset(at, 0, 16);
            }
            for (int i = 0; i < SYS_STRS; i++) {
                if (sys.flags & SYS_OK) {
                    if (append_string(slist[i], c, sys.strs[i], skind[i], &last[i]) < 0) goto fail;
                } else if (PyList_Append(slist[i], Py_None) < 0) {
                    goto fail;
                }
            }
        }
        if (want_data && (put_bytes(&col[C_SHAPE], 4 * n, &shape, 4) < 0 || put_bytes(&col[C_START], 4 * n, &start, 4) < 0))
            goto fail;
        n++;
        have_previous = 1;
        previous_id = record_id;
        pos += size;
    }
    for (int k = 0; k < N_COLS; k++)
        if (col[k] && _PyBytes_Resize(&col[k], width[k] * n) < 0) goto fail;
    PyMem_Free(b.p);
    PyObject *system = Py_None, *fielded = Py_None;
    if (want_system) {
        system = Py_BuildValue("(NNNNNNNN)", col[C_SYS_INTS], col[C_SYS_FLAGS], col[C_SYS_GUIDS], slist[0], slist[1], slist[2],
                               slist[3], slist[4]);
        col[C_SYS_INTS] = col[C_SYS_FLAGS] = col[C_SYS_GUIDS] = NULL;
        for (int i = 0; i < SYS_STRS; i++) slist[i] = NULL;
        if (!system) goto fail_fields;
    } else {
        Py_INCREF(system);
    }
    if (want_data) {
        fields = PyBytes_FromStringAndSize((const char *)fs.f, 12 * (Py_ssize_t)fs.n);
        if (!fields) { Py_DECREF(system); goto fail_fields; }
        Py_INCREF(c->shapes);
        fielded = Py_BuildValue("(NNNN)", col[C_SHAPE], col[C_START], fields, c->shapes);
        col[C_SHAPE] = col[C_START] = NULL;
        if (!fielded) { Py_DECREF(system); goto fail_fields; }
    } else {
        Py_INCREF(fielded);
    }
    PyMem_Free(fs.f);
    return Py_BuildValue("(NNNNNNkiNN)", col[C_POS], col[C_SIZE], col[C_ID], col[C_WRITTEN], xmls, outside, pos, rejected, system, fielded);
fail:
    PyMem_Free(b.p);
fail_fields:
    PyMem_Free(fs.f);
    for (int k = 0; k < N_COLS; k++) Py_XDECREF(col[k]);
    for (int i = 0; i < SYS_STRS; i++) Py_XDECREF(slist[i]);
    Py_XDECREF(xmls);
    Py_XDECREF(outside);
    return NULL;
}

/* The chunk offsets of the template definitions cached so far, in the order they were cached. */
static PyObject *chunk_templates(Chunk *c, PyObject *unused) {
    PyObject *out = PyList_New(c->nt);
    if (!out) return NULL;
    for (uint32_t i = 0; i < c->nt; i++) {
        PyObject *offset = PyLong_FromUnsignedLong(c->templates[i].offset);
        if (!offset) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, offset);
    }
    return out;
}

static PyMethodDef chunk_methods[] = {
    {"templates", (PyCFunction)chunk_templates, METH_NOARGS,
     "templates() -> the chunk offsets of the template definitions cached so far, in caching order"},
    {"walk", (PyCFunction)(void (*)(void))chunk_walk, METH_VARARGS | METH_KEYWORDS,
     "walk(pos, free, first_id, last_id, previous_id, system=True, data=True) -> (positions, sizes, ids, written, xml, outside, pos,\n"
     "rejected, system, data): the common records from pos as columns; system (None unless asked): (ints, flags, guids,\n"
     "providers, sources, channels, computers, users); data (None unless asked): (shapes, starts, fields, names)"},
    {"record", (PyCFunction)chunk_record, METH_VARARGS,
     "record(start, end) -> (end of the BinXml, XML text or None) when the pure parser accepts the record, else None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "openetw._native._evtx.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_dealloc = (destructor)chunk_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One chunk's bytes and the template definitions its records used so far.",
    .tp_methods = chunk_methods,
    .tp_new = chunk_new,
};

static PyObject *value_text(PyObject *self, PyObject *args) {
    int type;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*:value_text", &type, &data)) return NULL;
    Buf b = {0};
    int rc = lenient_text(&b, (uint8_t)type, data.buf, (size_t)data.len, ESC_NONE);
    PyBuffer_Release(&data);
    PyObject *out;
    if (rc < 0 || b.failed) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = PyUnicode_DecodeUTF8(b.p ? b.p : "", (Py_ssize_t)b.len, "strict");
    }
    PyMem_Free(b.p);
    return out;
}

static PyMethodDef module_methods[] = {
    {"value_text", value_text, METH_VARARGS, "value_text(type, data) -> render.value_text_lenient's text, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "openetw._native._evtx", "The compiled twin of the .evtx record parser and XML renderer.", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__evtx(void) {
    init_plain();
    if (PyType_Ready(&ChunkType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&ChunkType);
    if (PyModule_AddObject(m, "Chunk", (PyObject *)&ChunkType) < 0) {
        Py_DECREF(&ChunkType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
