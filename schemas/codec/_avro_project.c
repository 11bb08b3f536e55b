/* The packed projection's reader in C: runs a plan made by `avro_native.py`.
 *
 * Why: a consumer's reading thread spends most of its time turning each record's Avro
 * bytes into the tuple a packed builder stores (`avro_fastread.compile_projection`).
 * The plan is the same one the generated Python reader is made from
 * (`avro_fastread.plan_projection`); this file knows Avro's primitive encodings only. Anything else (records read whole,
 * arrays, MetaMaps, SpaceSpecs) is one step that calls the generated Python reader of
 * that field, so the two readers cannot drift on the types they share.
 *
 * A plan is a list of steps, one per field in schema order:
 *   (code, slot, nullable, obj, obj2)  slot -1: read, check and drop
 * then derived values (attributes of a record read whole), then the result's items.
 * Every value is checked as the Python reader checks it; whatever the Python reader
 * refuses, this refuses (tests/schemas/test_schema_native_projection.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

enum { OP_LONG, OP_STRING, OP_BYTES, OP_DOUBLE, OP_BOOL, OP_ENUM, OP_PY, OP_META };
enum { IT_SLOT, IT_CONST, IT_ARG, IT_CALL };
#define MEMO_SIZE 4
#define STACK_SLOTS 64

typedef struct {
    int code;
    int nullable;
    Py_ssize_t slot;
    PyObject *obj;   /* ENUM: tuple of members; PY, META: reader (b, p) -> (value, p) */
    PyObject *obj2;  /* META: the conversion */
    PyObject *memo;  /* META: list of (bytes, converted value), newest first */
} Step;

typedef struct { Py_ssize_t dst, src; PyObject *getter; } Derived;
typedef struct { int kind; Py_ssize_t slot; PyObject *obj; } Item;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Step *steps;
    Py_ssize_t nsteps;
    Derived *derived;
    Py_ssize_t nderived;
    Item *items;
    Py_ssize_t nitems;
    Py_ssize_t nslots;
    Py_ssize_t start;
    PyObject *refused;    /* (exception) -> raises */
    PyObject *trailing;   /* (bytes left) -> raises */
    PyObject *malformed;  /* the exception class of a malformed payload */
    PyObject *read_long;  /* the Python varint reader, for 10-byte varints */
} Projector;

/* A varint at *p: 0 and the value, -1 truncated, 1 ten bytes or more (left to Python,
 * whose ints hold what 64 bits cannot). */
static inline int
varint(const unsigned char *s, Py_ssize_t L, Py_ssize_t *p, long long *out)
{
    Py_ssize_t q = *p;
    unsigned long long n = 0;
    int shift = 0;
    for (;;) {
        if (q >= L)
            return -1;
        unsigned int x = s[q++];
        n |= (unsigned long long)(x & 0x7F) << shift;
        if (x < 0x80) {
            *p = q;
            *out = (long long)(n >> 1) ^ -(long long)(n & 1);
            return 0;
        }
        shift += 7;
        if (shift == 63)
            return 1;
    }
}

static int
bad(Projector *self, const char *what)
{
    PyErr_SetString(self->malformed, what);
    return -1;
}

/* The Python reader's (value, next position) of the varint at *p. */
static PyObject *
py_long(Projector *self, PyObject *b, Py_ssize_t *p)
{
    PyObject *at = PyLong_FromSsize_t(*p);
    if (at == NULL)
        return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(self->read_long, b, at, NULL);
    Py_DECREF(at);
    if (r == NULL)
        return NULL;
    PyObject *value = NULL;
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
        Py_ssize_t next = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
        if (!(next == -1 && PyErr_Occurred())) {
            *p = next;
            value = Py_NewRef(PyTuple_GET_ITEM(r, 0));
        }
    } else {
        PyErr_SetString(PyExc_TypeError, "read_long returned no (value, position)");
    }
    Py_DECREF(r);
    return value;
}

/* A long value as an object. */
static PyObject *
read_long_obj(Projector *self, PyObject *b, const unsigned char *s, Py_ssize_t L,
              Py_ssize_t *p)
{
    long long v;
    int r = varint(s, L, p, &v);
    if (r == 0)
        return PyLong_FromLongLong(v);
    if (r < 0) {
        bad(self, "truncated varint");
        return NULL;
    }
    return py_long(self, b, p);
}

/* A varint used as a count or an index; huge values come back as LLONG_MAX. */
static int
read_count(Projector *self, PyObject *b, const unsigned char *s, Py_ssize_t L,
           Py_ssize_t *p, long long *out)
{
    int r = varint(s, L, p, out);
    if (r == 0)
        return 0;
    if (r < 0)
        return bad(self, "truncated varint");
    PyObject *v = py_long(self, b, p);
    if (v == NULL)
        return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    Py_DECREF(v);
    if (overflow)
        *out = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    else if (*out == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

static int
all_ascii(const unsigned char *s, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] & 0x80)
            return 0;
    return 1;
}

/* Call fn(b, p) -> (value, next position). */
static PyObject *
py_read(PyObject *fn, PyObject *b, Py_ssize_t *p)
{
    PyObject *at = PyLong_FromSsize_t(*p);
    if (at == NULL)
        return NULL;
    PyObject *args[2] = {b, at};
    PyObject *r = PyObject_Vectorcall(fn, args, 2, NULL);
    Py_DECREF(at);
    if (r == NULL)
        return NULL;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "a field reader returned no (value, position)");
        return NULL;
    }
    Py_ssize_t next = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 1));
    if (next == -1 && PyErr_Occurred()) {
        Py_DECREF(r);
        return NULL;
    }
    *p = next;
    PyObject *value = Py_NewRef(PyTuple_GET_ITEM(r, 0));
    Py_DECREF(r);
    return value;
}

/* A MetaMap converted, through the memo of the last few values' bytes (Avro's encoding
 * is prefix-free: bytes starting with a kept value's complete encoding hold it). */
static PyObject *
read_meta(Step *st, PyObject *b, const unsigned char *s, Py_ssize_t L, Py_ssize_t *p)
{
    Py_ssize_t n = PyList_GET_SIZE(st->memo);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(st->memo, i);
        PyObject *raw = PyTuple_GET_ITEM(pair, 0);
        Py_ssize_t k = PyBytes_GET_SIZE(raw);
        if (k <= L - *p && memcmp(PyBytes_AS_STRING(raw), s + *p, (size_t)k) == 0) {
            *p += k;
            return Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        }
    }
    Py_ssize_t from = *p;
    PyObject *raw_value = py_read(st->obj, b, p);
    if (raw_value == NULL)
        return NULL;
    PyObject *value = PyObject_CallOneArg(st->obj2, raw_value);
    Py_DECREF(raw_value);
    if (value == NULL)
        return NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)s + from, *p - from);
    PyObject *pair = raw == NULL ? NULL : PyTuple_Pack(2, raw, value);
    Py_XDECREF(raw);
    if (pair == NULL || (n >= MEMO_SIZE && PySequence_DelItem(st->memo, n - 1) < 0)
            || PyList_Insert(st->memo, 0, pair) < 0) {
        Py_XDECREF(pair);
        Py_DECREF(value);
        return NULL;
    }
    Py_DECREF(pair);
    return value;
}

/* One step's value (a new reference; Py_None for a dropped one), or NULL. */
static PyObject *
read_step(Projector *self, Step *st, PyObject *b, const unsigned char *s, Py_ssize_t L,
          Py_ssize_t *p)
{
    long long n;
    if (st->nullable) {
        if (*p >= L) {
            bad(self, "truncated union");
            return NULL;
        }
        unsigned int branch = s[(*p)++];
        if (branch == 0) {
            if (st->code == OP_META)
                return PyObject_CallOneArg(st->obj2, Py_None);
            return Py_NewRef(Py_None);
        }
        if (branch != 2) {
            bad(self, "union branch");
            return NULL;
        }
    }
    switch (st->code) {
    case OP_LONG:
        return read_long_obj(self, b, s, L, p);
    case OP_STRING:
    case OP_BYTES:
        if (read_count(self, b, s, L, p, &n) < 0)
            return NULL;
        if (n < 0 || n > L - *p) {
            bad(self, "truncated");
            return NULL;
        }
        {
            const unsigned char *at = s + *p;
            if (st->code == OP_STRING && n > 0 && memchr(at, 0, (size_t)n) != NULL) {
                bad(self, "NUL in a string");  /* no event string holds U+0000 */
                return NULL;
            }
            *p += (Py_ssize_t)n;
            if (st->slot < 0 && (st->code == OP_BYTES || all_ascii(at, (Py_ssize_t)n)))
                return Py_NewRef(Py_None);  /* dropped, and valid UTF-8 (or bytes) */
            if (st->code == OP_BYTES)
                return PyBytes_FromStringAndSize((const char *)at, (Py_ssize_t)n);
            return PyUnicode_DecodeUTF8((const char *)at, (Py_ssize_t)n, NULL);
        }
    case OP_DOUBLE:
        if (L - *p < 8) {
            bad(self, "truncated double");
            return NULL;
        }
        {
            double d = PyFloat_Unpack8((const char *)s + *p, 1);
            if (d == -1.0 && PyErr_Occurred())
                return NULL;
            *p += 8;
            return PyFloat_FromDouble(d);
        }
    case OP_BOOL:
        if (*p >= L) {
            bad(self, "truncated boolean");
            return NULL;
        }
        {
            unsigned int x = s[(*p)++];
            if (x > 1) {
                bad(self, "boolean");
                return NULL;
            }
            return Py_NewRef(x ? Py_True : Py_False);
        }
    case OP_ENUM:
        if (read_count(self, b, s, L, p, &n) < 0)
            return NULL;
        if (n < 0 || n >= PyTuple_GET_SIZE(st->obj)) {
            bad(self, "enum index");
            return NULL;
        }
        return Py_NewRef(PyTuple_GET_ITEM(st->obj, (Py_ssize_t)n));
    case OP_PY:
        return py_read(st->obj, b, p);
    case OP_META:
        return read_meta(st, b, s, L, p);
    }
    PyErr_SetString(PyExc_SystemError, "unknown projection step");
    return NULL;
}

/* The steps, derived values and items: the values tuple, or NULL with the error set. */
static PyObject *
project(Projector *self, PyObject *b, PyObject *arg, Py_ssize_t *p, PyObject **slots)
{
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(b);
    Py_ssize_t L = PyBytes_GET_SIZE(b);
    for (Py_ssize_t i = 0; i < self->nsteps; i++) {
        Step *st = &self->steps[i];
        PyObject *v = read_step(self, st, b, s, L, p);
        if (v == NULL)
            return NULL;
        if (st->slot >= 0)
            slots[st->slot] = v;
        else
            Py_DECREF(v);
    }
    for (Py_ssize_t i = 0; i < self->nderived; i++) {
        Derived *d = &self->derived[i];
        PyObject *src = slots[d->src];
        slots[d->dst] = src == Py_None ? Py_NewRef(Py_None)
                                       : PyObject_CallOneArg(d->getter, src);
        if (slots[d->dst] == NULL)
            return NULL;
    }
    PyObject *values = PyTuple_New(self->nitems);
    if (values == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->nitems; i++) {
        Item *it = &self->items[i];
        PyObject *v;
        switch (it->kind) {
        case IT_SLOT: v = Py_NewRef(slots[it->slot]); break;
        case IT_CONST: v = Py_NewRef(it->obj); break;
        case IT_ARG: v = Py_NewRef(arg); break;
        default: v = PyObject_CallOneArg(it->obj, slots[it->slot]); break;
        }
        if (v == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        PyTuple_SET_ITEM(values, i, v);
    }
    return values;
}

/* The exception being raised, taken (a new reference). */
static PyObject *
raised(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL)
        PyException_SetTraceback(exc, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return exc;
#endif
}

/* (value, arg) -> values: one whole framed record, as the Python `project(b, arg)`. */
static PyObject *
Projector_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                     PyObject *kwnames)
{
    Projector *self = (Projector *)callable;
    if (PyVectorcall_NARGS(nargsf) != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a projection takes (value, arg)");
        return NULL;
    }
    PyObject *b = args[0];
    if (PyBytes_CheckExact(b))
        Py_INCREF(b);
    else if ((b = PyBytes_FromObject(b)) == NULL)
        return NULL;
    PyObject *stack[STACK_SLOTS];
    PyObject **slots = stack;
    if (self->nslots > STACK_SLOTS) {
        slots = PyMem_Calloc((size_t)self->nslots, sizeof(PyObject *));
        if (slots == NULL) {
            Py_DECREF(b);
            return PyErr_NoMemory();
        }
    } else {
        memset(stack, 0, sizeof(PyObject *) * (size_t)self->nslots);
    }
    Py_ssize_t p = self->start;
    PyObject *values = NULL;
    if (p > PyBytes_GET_SIZE(b))
        bad(self, "shorter than its header");
    else
        values = project(self, b, args[1], &p, slots);
    for (Py_ssize_t i = 0; i < self->nslots; i++)
        Py_XDECREF(slots[i]);
    if (slots != stack)
        PyMem_Free(slots);
    Py_ssize_t left = PyBytes_GET_SIZE(b) - p;
    Py_DECREF(b);
    if (values == NULL) {  /* refused: the caller's error, chained to ours */
        PyObject *exc = raised();
        PyObject *r = exc == NULL ? NULL : PyObject_CallOneArg(self->refused, exc);
        Py_XDECREF(exc);
        Py_XDECREF(r);
        if (r != NULL)
            PyErr_SetString(PyExc_SystemError, "the refusal callback did not raise");
        return NULL;
    }
    if (left != 0) {
        Py_DECREF(values);
        PyObject *n = PyLong_FromSsize_t(left);
        PyObject *r = n == NULL ? NULL : PyObject_CallOneArg(self->trailing, n);
        Py_XDECREF(n);
        Py_XDECREF(r);
        if (r != NULL)
            PyErr_SetString(PyExc_SystemError, "the trailing-bytes callback did not raise");
        return NULL;
    }
    return values;
}

static void
Projector_dealloc(Projector *self)
{
    for (Py_ssize_t i = 0; i < self->nsteps; i++) {
        Py_XDECREF(self->steps[i].obj);
        Py_XDECREF(self->steps[i].obj2);
        Py_XDECREF(self->steps[i].memo);
    }
    for (Py_ssize_t i = 0; i < self->nderived; i++)
        Py_XDECREF(self->derived[i].getter);
    for (Py_ssize_t i = 0; i < self->nitems; i++)
        Py_XDECREF(self->items[i].obj);
    PyMem_Free(self->steps);
    PyMem_Free(self->derived);
    PyMem_Free(self->items);
    Py_XDECREF(self->refused);
    Py_XDECREF(self->trailing);
    Py_XDECREF(self->malformed);
    Py_XDECREF(self->read_long);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
check_slot(Py_ssize_t slot, Py_ssize_t nslots, int may_drop)
{
    if ((slot < 0 && !(may_drop && slot == -1)) || slot >= nslots) {
        PyErr_Format(PyExc_ValueError, "slot %zd outside 0..%zd", slot, nslots - 1);
        return -1;
    }
    return 0;
}

static int
parse_steps(Projector *self, PyObject *steps)
{
    self->nsteps = PyList_GET_SIZE(steps);
    self->steps = PyMem_Calloc((size_t)self->nsteps + 1, sizeof(Step));
    if (self->steps == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < self->nsteps; i++) {
        Step *st = &self->steps[i];
        PyObject *obj, *obj2;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(steps, i), "inpOO;a step",
                              &st->code, &st->slot, &st->nullable, &obj, &obj2))
            return -1;
        if (st->code < OP_LONG || st->code > OP_META)
            return PyErr_Format(PyExc_ValueError, "unknown step %d", st->code), -1;
        if (check_slot(st->slot, self->nslots, 1) < 0)
            return -1;
        if (st->code == OP_ENUM && !PyTuple_Check(obj))
            return PyErr_Format(PyExc_TypeError, "an enum step takes a tuple"), -1;
        st->obj = Py_NewRef(obj);
        st->obj2 = Py_NewRef(obj2);
        if (st->code == OP_META && (st->memo = PyList_New(0)) == NULL)
            return -1;
    }
    return 0;
}

static int
parse_derived(Projector *self, PyObject *derived)
{
    self->nderived = PyList_GET_SIZE(derived);
    self->derived = PyMem_Calloc((size_t)self->nderived + 1, sizeof(Derived));
    if (self->derived == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < self->nderived; i++) {
        Derived *d = &self->derived[i];
        PyObject *getter;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(derived, i), "nnO;a derived value",
                              &d->dst, &d->src, &getter))
            return -1;
        if (check_slot(d->dst, self->nslots, 0) < 0 || check_slot(d->src, self->nslots, 0) < 0)
            return -1;
        d->getter = Py_NewRef(getter);
    }
    return 0;
}

static int
parse_items(Projector *self, PyObject *items)
{
    self->nitems = PyList_GET_SIZE(items);
    self->items = PyMem_Calloc((size_t)self->nitems + 1, sizeof(Item));
    if (self->items == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < self->nitems; i++) {
        Item *it = &self->items[i];
        PyObject *obj;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(items, i), "inO;an item",
                              &it->kind, &it->slot, &obj))
            return -1;
        if (it->kind < IT_SLOT || it->kind > IT_CALL)
            return PyErr_Format(PyExc_ValueError, "unknown item %d", it->kind), -1;
        if ((it->kind == IT_SLOT || it->kind == IT_CALL)
                && check_slot(it->slot, self->nslots, 0) < 0)
            return -1;
        it->obj = Py_NewRef(obj);
    }
    return 0;
}

static PyObject *
Projector_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"steps", "derived", "items", "slots", "start", "refused",
                             "trailing", "malformed", "read_long", NULL};
    PyObject *steps, *derived, *items, *refused, *trailing, *malformed, *read_long;
    Py_ssize_t nslots, start;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!nnOOOO", kwlist,
                                     &PyList_Type, &steps, &PyList_Type, &derived,
                                     &PyList_Type, &items, &nslots, &start, &refused,
                                     &trailing, &malformed, &read_long))
        return NULL;
    if (nslots < 0 || start < 0)
        return PyErr_Format(PyExc_ValueError, "negative slots or start");
    Projector *self = (Projector *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = Projector_vectorcall;
    self->nslots = nslots;
    self->start = start;
    self->refused = Py_NewRef(refused);
    self->trailing = Py_NewRef(trailing);
    self->malformed = Py_NewRef(malformed);
    self->read_long = Py_NewRef(read_long);
    if (parse_steps(self, steps) < 0 || parse_derived(self, derived) < 0
            || parse_items(self, items) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyTypeObject ProjectorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rlmesh_stream.schemas.codec._avro_project.Projector",
    .tp_doc = PyDoc_STR("A packed projection of framed Avro values: (value, arg) -> values."),
    .tp_basicsize = sizeof(Projector),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Projector_new,
    .tp_dealloc = (destructor)Projector_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Projector, vectorcall),
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_avro_project",
    PyDoc_STR("Runs packed projection plans (see avro_native.py)."), -1, NULL,
};

PyMODINIT_FUNC
PyInit__avro_project(void)
{
    if (PyType_Ready(&ProjectorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Projector", (PyObject *)&ProjectorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
