/*
 * gfd.topology._builder.encode: facts -> the compact input, in C.
 *
 * The twin of gfd.topology.compact.encode_python for the GPUs and PCI pairs (the
 * NVLink P2P records are few and stay in Python): same bytes, read straight from the
 * facts' objects through interned attribute names, so the half-million PciPair
 * objects of a 1024-GPU node cost no bytecode.
 *
 * PciPair is a slotted dataclass, so its three fields sit at fixed offsets in the object:
 * where the pairs' type reads them the generic way (no __getattribute__ of its own, each
 * name a member descriptor of the type), they are read from those offsets, which is what
 * the descriptor itself would do; any other type goes through PyObject_GetAttr.
 *
 * It encodes only what it can vouch for. On anything the reference encoder would
 * reject (a bad bus id, level or index, a pair listed twice), and on any value of a
 * type other than the facts declare (an int that is no int, a bus id that is no str),
 * it returns None and the caller runs the Python encoder, which raises the one
 * documented error with its message. So errors, their order and their text come from
 * one place, and the C code never has to agree with it on anything but success.
 */
#include "_builder.h"

#ifndef Py_T_OBJECT_EX /* Python 3.11 spells the member types in structmember.h */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { REMOTE_GPU = 0, REMOTE_SWITCH = 2, REMOTE_NOT_REPORTED = 254 };
enum { LEVEL_NOT_REPORTED = 255 };
#define INT32_LIMIT 2147483647LL
/* Distinct level objects remembered by identity (the facts share a few str objects). */
#define LEVEL_CACHE 8

static PyObject *name_index, *name_bus_id, *name_numa_node, *name_nvlinks, *name_active,
    *name_remote_bus_id, *name_remote_type, *name_a, *name_b, *name_level;

int gfd_encode_init(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&name_index, "index"},
        {&name_bus_id, "bus_id"},
        {&name_numa_node, "numa_node"},
        {&name_nvlinks, "nvlinks"},
        {&name_active, "active"},
        {&name_remote_bus_id, "remote_bus_id"},
        {&name_remote_type, "remote_type"},
        {&name_a, "a"},
        {&name_b, "b"},
        {&name_level, "level"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (!*names[i].slot)
            return -1;
    }
    return 0;
}

/* Outcome of reading one value: usable, or hand the whole input to the Python encoder. */
enum { READ_OK = 0, READ_DEFER = 1 };

/* An exception raised while reading the facts (a property that raises, an unhashable
 * level) is the Python encoder's to raise again; only memory exhaustion and
 * non-Exception signals (KeyboardInterrupt) go straight up. */
static PyObject *defer(void)
{
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError) ||
            !PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

/* A plain int (or bool, which the Python encoder compares as an int) within int64.
 * Indices are one-digit ints, read without a call: a third of the time of encoding
 * half a million pairs went to PyLong_AsLongLongAndOverflow. 3.12 has an API for it;
 * before it, a one-digit int is its sign (the size) times its one digit. */
static int read_int(PyObject *value, long long *out)
{
    if (!PyLong_CheckExact(value) && !PyBool_Check(value))
        return READ_DEFER;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)value)) {
        *out = PyUnstable_Long_CompactValue((PyLongObject *)value);
        return READ_OK;
    }
#else
    Py_ssize_t digits = Py_SIZE(value);
    if (digits >= -1 && digits <= 1) {
        *out = digits * (long long)((PyLongObject *)value)->ob_digit[0];
        return READ_OK;
    }
#endif
    int overflow = 0;
    long long result = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (result == -1 && PyErr_Occurred()))
        return READ_DEFER;
    *out = result;
    return READ_OK;
}

static int attr_int(PyObject *object, PyObject *name, long long *out)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (!value)
        return READ_DEFER;
    int status = read_int(value, out);
    Py_DECREF(value);
    return status;
}

static int hex_digit(Py_UCS1 c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex_field(const Py_UCS1 *text, Py_ssize_t digits, int64_t *out)
{
    int64_t value = 0;
    for (Py_ssize_t i = 0; i < digits; i++) {
        int digit = hex_digit(text[i]);
        if (digit < 0)
            return -1;
        value = value << 4 | digit;
    }
    *out = value;
    return 0;
}

/* compact.bus_key of a str: the same language as its regular expression, whose `$` also
 * matches before one final newline. -1 when it is no PCI bus id. */
static int64_t bus_key(PyObject *text)
{
    if (!PyUnicode_IS_ASCII(text))
        return -1; /* the expression's classes are ASCII ranges */
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    if (length > 0 && s[length - 1] == '\n')
        length--;
    Py_ssize_t domain_digits = length - 8; /* ":BB:DD.F" */
    if (domain_digits != 8 && domain_digits != 4)
        return -1;
    const Py_UCS1 *rest = s + domain_digits;
    int64_t domain, bus, device;
    if (hex_field(s, domain_digits, &domain) < 0 || rest[0] != ':' ||
        hex_field(rest + 1, 2, &bus) < 0 || rest[3] != ':' ||
        hex_field(rest + 4, 2, &device) < 0 || rest[6] != '.' || rest[7] < '0' || rest[7] > '7')
        return -1;
    return domain << 20 | bus << 12 | device << 4 | (int64_t)(rest[7] - '0');
}

/* Bus key of attribute `name`: READ_OK with -1 for None when `none_ok`, else a key. */
static int attr_bus_key(PyObject *object, PyObject *name, int none_ok, int64_t *out)
{
    PyObject *value = PyObject_GetAttr(object, name);
    if (!value)
        return READ_DEFER;
    int status = READ_DEFER;
    if (value == Py_None && none_ok) {
        *out = -1;
        status = READ_OK;
    } else if (PyUnicode_CheckExact(value)) {
        *out = bus_key(value);
        status = *out < 0 ? READ_DEFER : READ_OK;
    }
    Py_DECREF(value);
    return status;
}

static int compare_int64(const void *left, const void *right)
{
    int64_t a = *(const int64_t *)left, b = *(const int64_t *)right;
    return (a > b) - (a < b);
}

/* (link index, position in the GPU's tuple): sorting by both is Python's stable sort. */
typedef struct {
    int64_t index;
    Py_ssize_t position;
} link_order;

static int compare_link_order(const void *left, const void *right)
{
    const link_order *a = left, *b = right;
    if (a->index != b->index)
        return a->index < b->index ? -1 : 1;
    return (a->position > b->position) - (a->position < b->position);
}

static int is_gpu_key(const int64_t *sorted_keys, Py_ssize_t count, int64_t key)
{
    return bsearch(&key, sorted_keys, (size_t)count, sizeof(int64_t), compare_int64) != NULL;
}

/* A mapping's int value for `key` (the facts' level and remote-type tables). */
static int lookup_code(PyObject *table, PyObject *key, long long low, long long high,
                       long long *out)
{
    PyObject *value = PyDict_GetItemWithError(table, key); /* borrowed */
    if (!value)
        return READ_DEFER; /* not a name the table has, or unhashable */
    if (read_int(value, out) != READ_OK || *out < low || *out > high)
        return READ_DEFER;
    return READ_OK;
}

typedef struct {
    Py_ssize_t n;
    PyObject *gpus, *remote_codes;
    int64_t *keys;        /* per GPU, in order */
    int64_t *sorted_keys; /* the same, ascending, for "is this a GPU of the node" */
    int32_t *numa;
    int64_t *links;       /* LINK_FIELDS per record */
    Py_ssize_t link_records;
    link_order *order;
} encoding;

static void encoding_free(encoding *e)
{
    free(e->keys);
    free(e->sorted_keys);
    free(e->numa);
    free(e->links);
    free(e->order);
}

static void *alloc(size_t count, size_t size)
{
    return calloc(count ? count : 1, size);
}

/* Encode one GPU's active links, in link-index order. */
static int encode_links(encoding *e, Py_ssize_t position, PyObject *nvlinks)
{
    Py_ssize_t count = PyTuple_GET_SIZE(nvlinks);
    for (Py_ssize_t i = 0; i < count; i++) {
        long long index;
        if (attr_int(PyTuple_GET_ITEM(nvlinks, i), name_index, &index) != READ_OK)
            return READ_DEFER;
        e->order[i].index = index;
        e->order[i].position = i;
    }
    qsort(e->order, (size_t)count, sizeof(link_order), compare_link_order);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *link = PyTuple_GET_ITEM(nvlinks, e->order[i].position);
        PyObject *active = PyObject_GetAttr(link, name_active);
        if (!active)
            return READ_DEFER;
        int truth = PyObject_IsTrue(active);
        Py_DECREF(active);
        if (truth < 0)
            return READ_DEFER;
        if (!truth)
            continue;
        PyObject *type_name = PyObject_GetAttr(link, name_remote_type);
        if (!type_name)
            return READ_DEFER;
        long long remote_type;
        int status = lookup_code(e->remote_codes, type_name, 0, 255, &remote_type);
        Py_DECREF(type_name);
        int64_t remote_key;
        if (status != READ_OK || attr_bus_key(link, name_remote_bus_id, 1, &remote_key) != READ_OK)
            return READ_DEFER;
        if (remote_type == REMOTE_NOT_REPORTED && remote_key != -1)
            remote_type = is_gpu_key(e->sorted_keys, e->n, remote_key) ? REMOTE_GPU : REMOTE_SWITCH;
        int64_t *record = e->links + e->link_records * LINK_FIELDS;
        record[0] = position;
        record[1] = e->order[i].index;
        record[2] = remote_type;
        record[3] = remote_key;
        e->link_records++;
    }
    return READ_OK;
}

/* Bus keys, NUMA nodes and links of every GPU. */
static int encode_gpus(encoding *e)
{
    Py_ssize_t n = e->n, total_links = 0, most_links = 0;
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (attr_bus_key(PyTuple_GET_ITEM(e->gpus, gpu), name_bus_id, 0, &e->keys[gpu]) != READ_OK)
            return READ_DEFER;
    }
    memcpy(e->sorted_keys, e->keys, (size_t)n * sizeof(int64_t));
    qsort(e->sorted_keys, (size_t)n, sizeof(int64_t), compare_int64);
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        PyObject *links = PyObject_GetAttr(PyTuple_GET_ITEM(e->gpus, gpu), name_nvlinks);
        if (!links)
            return READ_DEFER;
        int plain = PyTuple_CheckExact(links);
        Py_ssize_t count = plain ? PyTuple_GET_SIZE(links) : 0;
        Py_DECREF(links); /* the GPU keeps the tuple alive; it is read again below */
        if (!plain || count > PY_SSIZE_T_MAX / (Py_ssize_t)(8 * LINK_FIELDS) - total_links)
            return READ_DEFER;
        total_links += count;
        most_links = count > most_links ? count : most_links;
    }
    e->links = alloc((size_t)total_links * LINK_FIELDS, sizeof(int64_t));
    e->order = alloc((size_t)most_links, sizeof(link_order));
    if (!e->links || !e->order) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        PyObject *facts = PyTuple_GET_ITEM(e->gpus, gpu);
        long long index;
        if (attr_int(facts, name_index, &index) != READ_OK || index != gpu)
            return READ_DEFER;
        PyObject *numa = PyObject_GetAttr(facts, name_numa_node);
        if (!numa)
            return READ_DEFER;
        long long node = -1;
        int status = numa == Py_None ? READ_OK : read_int(numa, &node);
        Py_DECREF(numa);
        if (status != READ_OK || node > INT32_LIMIT)
            return READ_DEFER;
        /* sysfs reports -1 for "no NUMA node"; it means the same as not reported. */
        e->numa[gpu] = node < 0 ? -1 : (int32_t)node;
        PyObject *links = PyObject_GetAttr(facts, name_nvlinks);
        if (!links)
            return READ_DEFER;
        /* Checked above; a property that changes its answer goes to the Python encoder. */
        if (!PyTuple_CheckExact(links) || PyTuple_GET_SIZE(links) > most_links ||
            e->link_records + PyTuple_GET_SIZE(links) > total_links) {
            Py_DECREF(links);
            return READ_DEFER;
        }
        status = encode_links(e, gpu, links);
        Py_DECREF(links);
        if (status != READ_OK)
            return status;
    }
    return READ_OK;
}

enum { PAIR_A, PAIR_B, PAIR_LEVEL, PAIR_FIELDS };

/* Where the pair fields of one type are: offsets of their slots, or none. */
typedef struct {
    PyTypeObject *type; /* borrowed: the pairs keep it alive for the call */
    int slotted;
    Py_ssize_t offset[PAIR_FIELDS];
} field_reader;

static void field_reader_for(field_reader *reader, PyTypeObject *type)
{
    PyObject *const names[PAIR_FIELDS] = {name_a, name_b, name_level};
    reader->type = type;
    reader->slotted = type->tp_getattro == PyObject_GenericGetAttr;
    for (int i = 0; i < PAIR_FIELDS && reader->slotted; i++) {
        /* The class attribute is what generic lookup finds first for a data descriptor. */
        PyObject *descr = PyObject_GetAttr((PyObject *)type, names[i]);
        if (!descr) {
            PyErr_Clear();
            reader->slotted = 0;
            break;
        }
        if (Py_TYPE(descr) == &PyMemberDescr_Type &&
            PyType_IsSubtype(type, PyDescr_TYPE(descr)) &&
            ((PyMemberDescrObject *)descr)->d_member->type == Py_T_OBJECT_EX)
            reader->offset[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        else
            reader->slotted = 0;
        Py_DECREF(descr);
    }
}

/* The pair's fields as new references; READ_DEFER when one is missing. */
static int pair_fields(field_reader *reader, PyObject *pair, PyObject **fields)
{
    PyObject *const names[PAIR_FIELDS] = {name_a, name_b, name_level};
    if (Py_TYPE(pair) != reader->type)
        field_reader_for(reader, Py_TYPE(pair));
    for (int i = 0; i < PAIR_FIELDS; i++) {
        if (reader->slotted) {
            fields[i] = *(PyObject **)((char *)pair + reader->offset[i]);
            Py_XINCREF(fields[i]); /* NULL: never set, an AttributeError for getattr */
        } else {
            fields[i] = PyObject_GetAttr(pair, names[i]);
        }
        if (!fields[i]) {
            for (int j = 0; j < i; j++)
                Py_DECREF(fields[j]);
            return READ_DEFER;
        }
    }
    return READ_OK;
}

typedef struct {
    PyObject *level[LEVEL_CACHE];
    unsigned char value[LEVEL_CACHE];
    int count;
} level_cache;

/* One pair into the triangle; READ_DEFER on what the Python encoder must judge. */
static int encode_pair(Py_ssize_t n, PyObject *pair, PyObject *pci_levels, field_reader *reader,
                   level_cache *cache, unsigned char *out)
{
    PyObject *fields[PAIR_FIELDS];
    if (pair_fields(reader, pair, fields) != READ_OK)
        return READ_DEFER;
    long long a = 0, b = 0;
    int usable = read_int(fields[PAIR_A], &a) == READ_OK &&
                 read_int(fields[PAIR_B], &b) == READ_OK && 0 <= a && a < b && b < n;
    Py_DECREF(fields[PAIR_A]);
    Py_DECREF(fields[PAIR_B]);
    PyObject *level = fields[PAIR_LEVEL];
    if (!usable) {
        Py_DECREF(level);
        return READ_DEFER;
    }
    int found = -1;
    for (int k = 0; k < cache->count; k++) {
        if (cache->level[k] == level) {
            found = k;
            break;
        }
    }
    unsigned char value;
    if (found >= 0) {
        value = cache->value[found];
    } else {
        long long code;
        int status = lookup_code(pci_levels, level, 0, LEVEL_NOT_REPORTED - 1, &code);
        if (status != READ_OK) {
            Py_DECREF(level);
            return READ_DEFER;
        }
        value = (unsigned char)code;
        if (cache->count < LEVEL_CACHE && PyUnicode_CheckExact(level)) {
            Py_INCREF(level);
            cache->level[cache->count] = level;
            cache->value[cache->count++] = value;
        }
    }
    Py_DECREF(level);
    Py_ssize_t offset = (Py_ssize_t)(a * (2 * n - a - 1) / 2 + (b - a - 1));
    if (out[offset] != LEVEL_NOT_REPORTED)
        return READ_DEFER; /* listed twice */
    out[offset] = value;
    return READ_OK;
}

/* The packed upper triangle of NVML level values (see compact._pair_levels). */
static int encode_pairs(Py_ssize_t n, PyObject *pairs, PyObject *pci_levels, unsigned char *out)
{
    field_reader reader = {NULL, 0, {0, 0, 0}};
    memset(out, LEVEL_NOT_REPORTED, (size_t)(n * (n - 1) / 2));
    /* Level objects already looked up, by identity, each held (only exact str, whose
     * lookup cannot vary). */
    level_cache cache = {{NULL}, {0}, 0};
    int status = READ_OK;
    Py_ssize_t count = PyTuple_GET_SIZE(pairs);
    for (Py_ssize_t i = 0; i < count && status == READ_OK; i++)
        status = encode_pair(n, PyTuple_GET_ITEM(pairs, i), pci_levels, &reader, &cache, out);
    for (int k = 0; k < cache.count; k++)
        Py_DECREF(cache.level[k]);
    return status;
}

PyObject *gfd_encode(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *gpus, *pairs, *pci_levels, *remote_codes;
    if (!PyArg_ParseTuple(args, "OOOO:encode", &gpus, &pairs, &pci_levels, &remote_codes))
        return NULL;
    if (!PyTuple_CheckExact(gpus) || !PyTuple_CheckExact(pairs) ||
        !PyDict_CheckExact(pci_levels) || !PyDict_CheckExact(remote_codes))
        return defer();
    Py_ssize_t n = PyTuple_GET_SIZE(gpus);
    if (n > MAX_GPUS)
        return defer(); /* the builder refuses it, after the Python encoder's checks */
    encoding e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.gpus = gpus;
    e.remote_codes = remote_codes;
    PyObject *bus_keys = NULL, *numa = NULL, *levels = NULL, *links = NULL, *result = NULL;
    e.keys = alloc((size_t)n, sizeof(int64_t));
    e.sorted_keys = alloc((size_t)n, sizeof(int64_t));
    e.numa = alloc((size_t)n, sizeof(int32_t));
    levels = PyBytes_FromStringAndSize(NULL, n * (n - 1) / 2);
    if (!e.keys || !e.sorted_keys || !e.numa) {
        PyErr_NoMemory();
        goto done;
    }
    if (!levels)
        goto done;
    int status = encode_gpus(&e);
    if (status == READ_OK)
        status = encode_pairs(n, pairs, pci_levels, (unsigned char *)PyBytes_AS_STRING(levels));
    if (status < 0)
        goto done;
    if (status == READ_DEFER) {
        result = defer();
        goto done;
    }
    bus_keys = PyBytes_FromStringAndSize((const char *)e.keys, n * (Py_ssize_t)sizeof(int64_t));
    numa = PyBytes_FromStringAndSize((const char *)e.numa, n * (Py_ssize_t)sizeof(int32_t));
    links = PyBytes_FromStringAndSize((const char *)e.links,
                                      e.link_records * LINK_FIELDS * (Py_ssize_t)sizeof(int64_t));
    if (bus_keys && numa && links)
        result = PyTuple_Pack(4, bus_keys, numa, levels, links);
done:
    Py_XDECREF(bus_keys);
    Py_XDECREF(numa);
    Py_XDECREF(levels);
    Py_XDECREF(links);
    encoding_free(&e);
    return result;
}
