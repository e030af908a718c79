/*
 * gfd.topology._builder: the C topology builder.
 *
 * Owns one function, build(gpu_count, bus_keys, numa_nodes, levels, links[, p2p]), the
 * twin of gfd/topology/python_builder.py: same input (the compact buffers of
 * gfd/topology/compact.py), same raw result, same checks in the same order with the
 * same messages (raised as gfd.base.errors.TopologyError). The rules are documented
 * there; change one builder, change the other. The module also holds the C ends of
 * the path around it: encode (facts -> compact input, _encode.c) and the matrix cells
 * and annotation rows (_cells.c).
 *
 * Everything is flat arrays: the two N x N planes are written straight into the
 * bytes objects that are returned, so the only Python objects made are the result
 * tuple, the domains (O(N) in total) and the NUMA counts.
 */
#include "_builder.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REMOTE_GPU = 0, REMOTE_IBMNPU = 1, REMOTE_SWITCH = 2, REMOTE_NOT_REPORTED = 254,
       REMOTE_UNKNOWN = 255 };
enum { LEVEL_PIX = 1, LEVEL_PXB = 2, LEVEL_PHB = 3, LEVEL_NODE = 4, LEVEL_SYS = 5,
       LEVEL_UNKNOWN = 6, LEVEL_INVALID = 0xFF, LEVEL_NOT_REPORTED = 255 };
enum { IC_NONE, IC_SINGLE, IC_PCIE, IC_NVLINK_PARTIAL, IC_NVLINK, IC_NVSWITCH };

PyObject *gfd_topology_error;

typedef struct {
    int64_t key;
    Py_ssize_t gpu;
} keyed_gpu;

/* Scratch memory of one build; freed in one place whatever happens. */
typedef struct {
    int64_t *keys;
    int32_t *numa;
    keyed_gpu *by_key;
    keyed_gpu *switch_ends;
    Py_ssize_t *switch_links;
    Py_ssize_t *fabric;
    Py_ssize_t *fabric_start;
    Py_ssize_t *fabric_members;
    Py_ssize_t *parent;
    Py_ssize_t *domain_of;
    Py_ssize_t *domain_of_root;
    Py_ssize_t *domain_size;
    unsigned char *all_to_all;
    int32_t *numa_sorted;
    unsigned char *outside;
} scratch;

static void scratch_free(scratch *s)
{
    free(s->keys);
    free(s->numa);
    free(s->by_key);
    free(s->switch_ends);
    free(s->switch_links);
    free(s->fabric);
    free(s->fabric_start);
    free(s->fabric_members);
    free(s->parent);
    free(s->domain_of);
    free(s->domain_of_root);
    free(s->domain_size);
    free(s->all_to_all);
    free(s->numa_sorted);
    free(s->outside);
}

static void *alloc(size_t count, size_t size)
{
    /* calloc(0, ...) may return NULL; ask for one element so NULL always means failure. */
    return calloc(count ? count : 1, size);
}

static void format_bus_id(char *out, size_t size, int64_t key)
{
    snprintf(out, size, "%08llX:%02llX:%02llX.%llX", (unsigned long long)(key >> 20),
             (unsigned long long)((key >> 12) & 0xFF), (unsigned long long)((key >> 4) & 0xFF),
             (unsigned long long)(key & 0xF));
}

static int compare_keyed(const void *left, const void *right)
{
    const keyed_gpu *a = left, *b = right;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    if (a->gpu != b->gpu)
        return a->gpu < b->gpu ? -1 : 1;
    return 0;
}

static int compare_int32(const void *left, const void *right)
{
    int32_t a = *(const int32_t *)left, b = *(const int32_t *)right;
    return (a > b) - (a < b);
}

static Py_ssize_t find_root(Py_ssize_t *parent, Py_ssize_t node)
{
    while (parent[node] != node) {
        parent[node] = parent[parent[node]];
        node = parent[node];
    }
    return node;
}

/* The smaller index becomes the root, so a root is always its set's smallest member. */
static void join(Py_ssize_t *parent, Py_ssize_t a, Py_ssize_t b)
{
    Py_ssize_t root_a = find_root(parent, a), root_b = find_root(parent, b);
    if (root_a < root_b)
        parent[root_b] = root_a;
    else if (root_b < root_a)
        parent[root_a] = root_b;
}

/* GPU whose bus key is `key`, or -1. `by_key` is sorted and free of duplicates. */
static Py_ssize_t gpu_of_key(const keyed_gpu *by_key, Py_ssize_t n, int64_t key)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (by_key[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && by_key[lo].key == key ? by_key[lo].gpu : -1;
}

static int check_sizes(Py_ssize_t n, const Py_buffer *bus_keys, const Py_buffer *numa,
                       const Py_buffer *levels, const Py_buffer *links, const Py_buffer *p2p)
{
    const struct {
        const char *name;
        const Py_buffer *buffer;
        Py_ssize_t size;
    } expected[] = {
        {"bus_keys", bus_keys, 8 * n},
        {"numa_nodes", numa, 4 * n},
        {"levels", levels, n * (n - 1) / 2},
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
        if (expected[i].buffer->len != expected[i].size) {
            PyErr_Format(gfd_topology_error, "compact input %s holds %zd bytes; %zd GPUs need %zd",
                         expected[i].name, expected[i].buffer->len, n, expected[i].size);
            return -1;
        }
    }
    if (links->len % (8 * LINK_FIELDS)) {
        PyErr_Format(gfd_topology_error,
                     "compact input links holds %zd bytes, not a multiple of the %d-byte link "
                     "record",
                     links->len, 8 * LINK_FIELDS);
        return -1;
    }
    if (p2p->len % (8 * P2P_FIELDS)) {
        PyErr_Format(gfd_topology_error,
                     "compact input p2p holds %zd bytes, not a multiple of the %d-byte P2P "
                     "record",
                     p2p->len, 8 * P2P_FIELDS);
        return -1;
    }
    return 0;
}

static int index_gpus(scratch *s, Py_ssize_t n, const Py_buffer *bus_keys)
{
    memcpy(s->keys, bus_keys->buf, (size_t)n * sizeof(int64_t));
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        int64_t key = s->keys[gpu];
        if (key < 0 || key >= BUS_KEY_LIMIT) {
            PyErr_Format(gfd_topology_error, "GPU %zd: bus key %lld is not a PCI address", gpu,
                         (long long)key);
            return -1;
        }
        s->by_key[gpu].key = key;
        s->by_key[gpu].gpu = gpu;
    }
    qsort(s->by_key, (size_t)n, sizeof(keyed_gpu), compare_keyed);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (s->by_key[i - 1].key == s->by_key[i].key) {
            char bus[32];
            format_bus_id(bus, sizeof bus, s->by_key[i].key);
            PyErr_Format(gfd_topology_error, "GPUs %zd and %zd have the same PCI bus id %s",
                         s->by_key[i - 1].gpu, s->by_key[i].gpu, bus);
            return -1;
        }
    }
    return 0;
}

/* Validate the level triangle and write the symmetric level plane. */
static int fill_levels(unsigned char *plane, Py_ssize_t n, const unsigned char *levels)
{
    unsigned char table[256];
    memset(table, LEVEL_INVALID, sizeof table);
    table[0] = LEVEL_PIX;
    table[10] = LEVEL_PIX;
    table[20] = LEVEL_PXB;
    table[30] = LEVEL_PHB;
    table[40] = LEVEL_NODE;
    table[50] = LEVEL_SYS;
    table[LEVEL_NOT_REPORTED] = LEVEL_UNKNOWN;
    Py_ssize_t pair = 0;
    for (Py_ssize_t a = 0; a < n; a++) {
        unsigned char *row = plane + a * n;
        row[a] = 0;
        for (Py_ssize_t b = a + 1; b < n; b++, pair++) {
            unsigned char code = table[levels[pair]];
            if (code == LEVEL_INVALID) {
                PyErr_Format(gfd_topology_error,
                             "GPUs %zd and %zd: common-ancestor level %d is not one NVML "
                             "returns (0, 10, 20, 30, 40, 50)",
                             a, b, (int)levels[pair]);
                return -1;
            }
            row[b] = code;
        }
    }
    /* Mirror the upper triangle in small square tiles. Walking a whole column touches a
     * new cache line per cell, and with a power-of-two row length those lines fall into
     * the same few cache sets; 8x8 tiles measured fastest at 1024 GPUs. */
    enum { TILE = 8 };
    for (Py_ssize_t a0 = 0; a0 < n; a0 += TILE) {
        Py_ssize_t a1 = a0 + TILE < n ? a0 + TILE : n;
        for (Py_ssize_t b0 = a0; b0 < n; b0 += TILE) {
            Py_ssize_t b1 = b0 + TILE < n ? b0 + TILE : n;
            for (Py_ssize_t a = a0; a < a1; a++) {
                for (Py_ssize_t b = (b0 > a + 1 ? b0 : a + 1); b < b1; b++)
                    plane[b * n + a] = plane[a * n + b];
            }
        }
    }
    return 0;
}

/* Count direct links into `nvlinks`, switch links and links leaving the node per GPU,
 * and collect switch ends. */
static int read_links(scratch *s, Py_ssize_t n, const Py_buffer *links, unsigned char *nvlinks,
                      Py_ssize_t *switch_end_count)
{
    Py_ssize_t records = links->len / (8 * LINK_FIELDS);
    const char *base = links->buf;
    int64_t previous_gpu = -1, previous_link = -1;
    Py_ssize_t active = 0, ends = 0;
    for (Py_ssize_t r = 0; r < records; r++) {
        int64_t field[LINK_FIELDS];
        memcpy(field, base + r * 8 * LINK_FIELDS, sizeof field);
        int64_t gpu = field[0], link = field[1], remote_type = field[2], remote_key = field[3];
        if (gpu < 0 || gpu >= n) {
            PyErr_Format(gfd_topology_error,
                         "NVLink record %zd names GPU %lld, but the node has %zd GPUs", r,
                         (long long)gpu, n);
            return -1;
        }
        if (link < 0) {
            PyErr_Format(gfd_topology_error, "GPU %lld: NVLink index %lld is negative",
                         (long long)gpu, (long long)link);
            return -1;
        }
        if (gpu == previous_gpu && link == previous_link) {
            PyErr_Format(gfd_topology_error, "GPU %lld lists NVLink %lld twice", (long long)gpu,
                         (long long)link);
            return -1;
        }
        if (gpu < previous_gpu || (gpu == previous_gpu && link < previous_link)) {
            PyErr_Format(gfd_topology_error,
                         "NVLink records must be sorted by GPU and link index (GPU %lld link "
                         "%lld follows GPU %lld link %lld)",
                         (long long)gpu, (long long)link, (long long)previous_gpu,
                         (long long)previous_link);
            return -1;
        }
        active = gpu == previous_gpu ? active + 1 : 1;
        previous_gpu = gpu;
        previous_link = link;
        if (active > MAX_ACTIVE_LINKS) {
            PyErr_Format(gfd_topology_error, "GPU %lld reports more than %d active NVLinks",
                         (long long)gpu, MAX_ACTIVE_LINKS);
            return -1;
        }
        if (remote_type != REMOTE_GPU && remote_type != REMOTE_IBMNPU &&
            remote_type != REMOTE_SWITCH && remote_type != REMOTE_NOT_REPORTED &&
            remote_type != REMOTE_UNKNOWN) {
            PyErr_Format(gfd_topology_error,
                         "GPU %lld NVLink %lld: remote type %lld is not an NVML remote device "
                         "type",
                         (long long)gpu, (long long)link, (long long)remote_type);
            return -1;
        }
        if (remote_key < -1 || remote_key >= BUS_KEY_LIMIT) {
            PyErr_Format(gfd_topology_error,
                         "GPU %lld NVLink %lld: remote bus key %lld is not a PCI address",
                         (long long)gpu, (long long)link, (long long)remote_key);
            return -1;
        }
        if (remote_type == REMOTE_SWITCH) {
            s->switch_links[gpu]++;
            s->switch_ends[ends].key = remote_key;
            s->switch_ends[ends].gpu = (Py_ssize_t)gpu;
            ends++;
            continue;
        }
        if (remote_type == REMOTE_IBMNPU || remote_key < 0)
            continue;
        Py_ssize_t peer = gpu_of_key(s->by_key, n, remote_key);
        if (peer < 0) {
            /* A GPU that is not on this node (a VM given one GPU of a bridged pair). */
            if (remote_type == REMOTE_GPU)
                s->outside[gpu]++;
            continue;
        }
        if (peer == gpu) {
            char own[32];
            format_bus_id(own, sizeof own, s->keys[gpu]);
            PyErr_Format(gfd_topology_error,
                         "GPU %lld (%s) NVLink %lld: the remote end is the GPU itself",
                         (long long)gpu, own, (long long)link);
            return -1;
        }
        nvlinks[gpu * n + peer]++;
    }
    *switch_end_count = ends;
    return 0;
}

/* Join GPUs that reach a common switch. */
static void join_switch_ends(scratch *s, Py_ssize_t n, Py_ssize_t ends)
{
    for (Py_ssize_t gpu = 0; gpu < n; gpu++)
        s->fabric[gpu] = gpu;
    qsort(s->switch_ends, (size_t)ends, sizeof(keyed_gpu), compare_keyed);
    for (Py_ssize_t i = 1; i < ends; i++) {
        if (s->switch_ends[i].key == s->switch_ends[i - 1].key)
            join(s->fabric, s->switch_ends[i - 1].gpu, s->switch_ends[i].gpu);
    }
}

/* NVLink P2P "ok" between GPUs with switch links joins their fabrics (trunks). */
static int join_p2p_fabrics(scratch *s, Py_ssize_t n, const Py_buffer *p2p)
{
    Py_ssize_t records = p2p->len / (8 * P2P_FIELDS);
    const char *base = p2p->buf;
    int64_t previous_a = -1, previous_b = -1;
    for (Py_ssize_t r = 0; r < records; r++) {
        int64_t field[P2P_FIELDS];
        memcpy(field, base + r * 8 * P2P_FIELDS, sizeof field);
        int64_t a = field[0], b = field[1];
        if (!(0 <= a && a < b && b < n)) {
            PyErr_Format(gfd_topology_error,
                         "NVLink P2P record %zd names GPUs (%lld, %lld); expected two GPU "
                         "indices a < b below %zd",
                         r, (long long)a, (long long)b, n);
            return -1;
        }
        if (a < previous_a || (a == previous_a && b <= previous_b)) {
            PyErr_Format(gfd_topology_error,
                         "NVLink P2P records must be sorted by GPU pair, each listed once "
                         "((%lld, %lld) follows (%lld, %lld))",
                         (long long)a, (long long)b, (long long)previous_a,
                         (long long)previous_b);
            return -1;
        }
        previous_a = a;
        previous_b = b;
        if (s->switch_links[a] && s->switch_links[b])
            join(s->fabric, (Py_ssize_t)a, (Py_ssize_t)b);
    }
    return 0;
}

/* Add each GPU's switch links towards the other GPUs of its fabric. */
static void add_switched_links(scratch *s, Py_ssize_t n, unsigned char *nvlinks)
{
    for (Py_ssize_t gpu = 0; gpu < n; gpu++)
        s->fabric[gpu] = find_root(s->fabric, gpu);
    /* Bucket the switch-attached GPUs by fabric (a counting sort on the root), so the
     * pairs visited are those inside a fabric, not all N^2. */
    for (Py_ssize_t root = 0; root <= n; root++)
        s->fabric_start[root] = 0;
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (s->switch_links[gpu])
            s->fabric_start[s->fabric[gpu] + 1]++;
    }
    for (Py_ssize_t root = 0; root < n; root++)
        s->fabric_start[root + 1] += s->fabric_start[root];
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (s->switch_links[gpu])
            s->fabric_members[s->fabric_start[s->fabric[gpu]]++] = gpu;
    }
    /* fabric_start[root] now holds the end of the root's bucket. */
    for (Py_ssize_t root = 0, begin = 0; root < n; root++) {
        Py_ssize_t end = s->fabric_start[root];
        for (Py_ssize_t i = begin; i < end; i++) {
            Py_ssize_t a = s->fabric_members[i];
            unsigned char count = (unsigned char)s->switch_links[a];
            unsigned char *row = nvlinks + a * n;
            for (Py_ssize_t j = begin; j < end; j++) {
                if (j != i)
                    row[s->fabric_members[j]] = (unsigned char)(row[s->fabric_members[j]] + count);
            }
        }
        begin = end;
    }
}

/* Whether every listed GPU has switch links into the fabric of the first one. */
static int one_fabric(const scratch *s, const Py_ssize_t *gpus, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t gpu = gpus[i];
        if (!s->switch_links[gpu] || s->fabric[gpu] != s->fabric[gpus[0]])
            return 0;
    }
    return 1;
}

/* Whether every GPU of the node has switch links into one fabric. */
static int node_in_one_fabric(const scratch *s, Py_ssize_t n)
{
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (!s->switch_links[gpu] || s->fabric[gpu] != s->fabric[0])
            return 0;
    }
    return 1;
}

static PyObject *numa_counts(scratch *s, Py_ssize_t n)
{
    Py_ssize_t known = 0;
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (s->numa[gpu] >= 0)
            s->numa_sorted[known++] = s->numa[gpu];
    }
    qsort(s->numa_sorted, (size_t)known, sizeof(int32_t), compare_int32);
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < known; i++)
        distinct += i == 0 || s->numa_sorted[i] != s->numa_sorted[i - 1];
    PyObject *result = PyTuple_New(distinct);
    if (!result)
        return NULL;
    Py_ssize_t slot = 0;
    for (Py_ssize_t i = 0; i < known;) {
        Py_ssize_t j = i;
        while (j < known && s->numa_sorted[j] == s->numa_sorted[i])
            j++;
        PyObject *entry = Py_BuildValue("(in)", (int)s->numa_sorted[i], j - i);
        if (!entry) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, slot++, entry);
        i = j;
    }
    return result;
}

static PyObject *build_domains(scratch *s, Py_ssize_t n, Py_ssize_t domains)
{
    /* Members of every domain, grouped by domain, ascending within each. */
    PyObject *result = PyList_New(domains);
    if (!result)
        return NULL;
    Py_ssize_t *members = alloc((size_t)n, sizeof(Py_ssize_t));
    Py_ssize_t *fill = alloc((size_t)domains, sizeof(Py_ssize_t));
    if (!members || !fill) {
        free(members);
        free(fill);
        Py_DECREF(result);
        return PyErr_NoMemory();
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t d = 0; d < domains; d++) {
        fill[d] = total;
        total += s->domain_size[d];
    }
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        Py_ssize_t d = s->domain_of[gpu];
        if (d >= 0)
            members[fill[d]++] = gpu;
    }
    Py_ssize_t start = 0;
    for (Py_ssize_t d = 0; d < domains; d++) {
        Py_ssize_t size = s->domain_size[d];
        PyObject *gpus = PyTuple_New(size);
        if (!gpus)
            goto fail;
        for (Py_ssize_t i = 0; i < size; i++) {
            PyObject *index = PyLong_FromSsize_t(members[start + i]);
            if (!index) {
                Py_DECREF(gpus);
                goto fail;
            }
            PyTuple_SET_ITEM(gpus, i, index);
        }
        int switched = one_fabric(s, members + start, size);
        PyObject *domain = Py_BuildValue("(NOO)", gpus, s->all_to_all[d] ? Py_True : Py_False,
                                         switched ? Py_True : Py_False);
        if (!domain)
            goto fail;
        PyList_SET_ITEM(result, d, domain);
        start += size;
    }
    free(members);
    free(fill);
    return result;
fail:
    free(members);
    free(fill);
    Py_DECREF(result);
    return NULL;
}

/* Number the NVLink domains (groups of 2+ GPUs joined by NVLink) by their first GPU. */
static Py_ssize_t number_domains(scratch *s, Py_ssize_t n, const unsigned char *nvlinks)
{
    for (Py_ssize_t gpu = 0; gpu < n; gpu++)
        s->parent[gpu] = gpu;
    for (Py_ssize_t a = 0; a < n; a++) {
        const unsigned char *row = nvlinks + a * n;
        for (Py_ssize_t b = 0; b < n; b++) {
            if (row[b] && a != b)
                join(s->parent, a, b);
        }
    }
    /* domain_size, indexed by root first, counts the members of each root's group. */
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        s->domain_size[gpu] = 0;
        s->domain_of[gpu] = -1;
    }
    for (Py_ssize_t gpu = 0; gpu < n; gpu++)
        s->domain_size[find_root(s->parent, gpu)]++;
    /* Roots are the smallest members, so numbering roots in index order numbers the
     * domains by their first GPU. */
    Py_ssize_t domains = 0;
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (s->parent[gpu] == gpu && s->domain_size[gpu] > 1)
            s->domain_of_root[gpu] = domains++;
        else
            s->domain_of_root[gpu] = -1;
    }
    for (Py_ssize_t gpu = 0; gpu < n; gpu++)
        s->domain_of[gpu] = s->domain_of_root[find_root(s->parent, gpu)];
    /* Compact the sizes to domain numbers. */
    for (Py_ssize_t gpu = 0, d = 0; gpu < n; gpu++) {
        if (s->domain_of_root[gpu] >= 0)
            s->domain_size[d++] = s->domain_size[gpu];
    }
    for (Py_ssize_t d = 0; d < domains; d++)
        s->all_to_all[d] = 1;
    return domains;
}

static PyObject *build(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t n;
    Py_buffer bus_keys, numa, levels, links, p2p;
    memset(&p2p, 0, sizeof p2p);
    if (!PyArg_ParseTuple(args, "ny*y*y*y*|y*:build", &n, &bus_keys, &numa, &levels, &links,
                          &p2p))
        return NULL;
    scratch s;
    memset(&s, 0, sizeof s);
    PyObject *plane = NULL, *nvlink_plane = NULL, *domains = NULL, *numa_result = NULL;
    PyObject *outside = NULL;
    PyObject *result = NULL;

    if (n < 0 || n > MAX_GPUS) {
        PyErr_Format(gfd_topology_error, "a topology has 0 to %d GPUs, got %zd", MAX_GPUS, n);
        goto done;
    }
    if (check_sizes(n, &bus_keys, &numa, &levels, &links, &p2p) < 0)
        goto done;
    Py_ssize_t records = links.len / (8 * LINK_FIELDS);
    s.keys = alloc((size_t)n, sizeof(int64_t));
    s.numa = alloc((size_t)n, sizeof(int32_t));
    s.by_key = alloc((size_t)n, sizeof(keyed_gpu));
    s.switch_ends = alloc((size_t)records, sizeof(keyed_gpu));
    s.switch_links = alloc((size_t)n, sizeof(Py_ssize_t));
    s.fabric = alloc((size_t)n, sizeof(Py_ssize_t));
    s.fabric_start = alloc((size_t)n + 1, sizeof(Py_ssize_t));
    s.fabric_members = alloc((size_t)n, sizeof(Py_ssize_t));
    s.parent = alloc((size_t)n, sizeof(Py_ssize_t));
    s.domain_of = alloc((size_t)n, sizeof(Py_ssize_t));
    s.domain_of_root = alloc((size_t)n, sizeof(Py_ssize_t));
    s.domain_size = alloc((size_t)n, sizeof(Py_ssize_t));
    s.all_to_all = alloc((size_t)n, 1);
    s.numa_sorted = alloc((size_t)n, sizeof(int32_t));
    s.outside = alloc((size_t)n, 1);
    if (!s.outside || !s.keys || !s.numa || !s.by_key || !s.switch_ends || !s.switch_links ||
        !s.fabric ||
        !s.fabric_start || !s.fabric_members || !s.parent || !s.domain_of || !s.domain_of_root ||
        !s.domain_size || !s.all_to_all || !s.numa_sorted) {
        PyErr_NoMemory();
        goto done;
    }
    if (index_gpus(&s, n, &bus_keys) < 0)
        goto done;
    memcpy(s.numa, numa.buf, (size_t)n * sizeof(int32_t));
    for (Py_ssize_t gpu = 0; gpu < n; gpu++) {
        if (s.numa[gpu] < -1) {
            PyErr_Format(gfd_topology_error, "GPU %zd: NUMA node %d is not valid (-1 means unknown)",
                         gpu, (int)s.numa[gpu]);
            goto done;
        }
    }
    plane = PyBytes_FromStringAndSize(NULL, n * n);
    nvlink_plane = PyBytes_FromStringAndSize(NULL, n * n);
    if (!plane || !nvlink_plane)
        goto done;
    unsigned char *levels_out = (unsigned char *)PyBytes_AS_STRING(plane);
    unsigned char *nv = (unsigned char *)PyBytes_AS_STRING(nvlink_plane);
    memset(nv, 0, (size_t)(n * n));
    if (fill_levels(levels_out, n, levels.buf) < 0)
        goto done;
    Py_ssize_t ends = 0;
    if (read_links(&s, n, &links, nv, &ends) < 0)
        goto done;
    join_switch_ends(&s, n, ends);
    if (join_p2p_fabrics(&s, n, &p2p) < 0)
        goto done;
    add_switched_links(&s, n, nv);

    Py_ssize_t domain_count = number_domains(&s, n, nv);
    long min_nvlinks = -1, pcie_worst = -1;
    int any_nvlink = 0, all_nvlink = 1;
    for (Py_ssize_t a = 0; a < n; a++) {
        const unsigned char *row = nv + a * n, *level_row = levels_out + a * n;
        Py_ssize_t own_domain = s.domain_of[a];
        for (Py_ssize_t b = 0; b < n; b++) {
            if (a == b)
                continue;
            long count = row[b];
            if (min_nvlinks < 0 || count < min_nvlinks)
                min_nvlinks = count;
            if (count) {
                any_nvlink = 1;
                continue;
            }
            all_nvlink = 0;
            if (level_row[b] > pcie_worst)
                pcie_worst = level_row[b];
            if (own_domain >= 0 && own_domain == s.domain_of[b])
                s.all_to_all[own_domain] = 0;
        }
    }
    int interconnect;
    if (n == 0)
        interconnect = IC_NONE;
    else if (n == 1)
        interconnect = IC_SINGLE;
    else if (!any_nvlink)
        interconnect = IC_PCIE;
    else if (!all_nvlink)
        interconnect = IC_NVLINK_PARTIAL;
    else
        interconnect = node_in_one_fabric(&s, n) ? IC_NVSWITCH : IC_NVLINK;

    domains = build_domains(&s, n, domain_count);
    if (!domains)
        goto done;
    numa_result = numa_counts(&s, n);
    if (!numa_result)
        goto done;
    outside = PyBytes_FromStringAndSize((const char *)s.outside, n);
    if (!outside)
        goto done;
    result = Py_BuildValue("(OOOillOO)", plane, nvlink_plane, domains, interconnect, min_nvlinks,
                           pcie_worst, numa_result, outside);
done:
    Py_XDECREF(plane);
    Py_XDECREF(nvlink_plane);
    Py_XDECREF(domains);
    Py_XDECREF(numa_result);
    Py_XDECREF(outside);
    scratch_free(&s);
    PyBuffer_Release(&bus_keys);
    PyBuffer_Release(&numa);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&links);
    if (p2p.obj)
        PyBuffer_Release(&p2p);
    return result;
}

static PyMethodDef builder_methods[] = {
    {"build", build, METH_VARARGS,
     "build(gpu_count, bus_keys, numa_nodes, levels, links, p2p=b'') -> raw topology tuple\n\n"
     "Build the GPU topology from the compact input of gfd.topology.compact."},
    {"encode", gfd_encode, METH_VARARGS,
     "encode(gpus, pci_pairs, pci_levels, remote_codes) -> (bus_keys, numa_nodes, levels, "
     "links) or None\n\n"
     "The compact buffers of the GPUs and PCI pairs of facts; None where the Python "
     "encoder must decide (an error to raise, a value of another type)."},
    {"matrix_rows", gfd_matrix_rows, METH_VARARGS,
     "matrix_rows(gpu_count, levels, nvlinks) -> list of rows of cell strings"},
    {"run_length_rows", gfd_run_length_rows, METH_VARARGS,
     "run_length_rows(gpu_count, levels, nvlinks) -> one run-length encoded string per row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef builder_module = {
    PyModuleDef_HEAD_INIT,
    "gfd.topology._builder",
    "The C topology builder; twin of gfd.topology.python_builder.",
    -1,
    builder_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__builder(void)
{
    PyObject *errors = PyImport_ImportModule("gfd.base.errors");
    if (!errors)
        return NULL;
    gfd_topology_error = PyObject_GetAttrString(errors, "TopologyError");
    Py_DECREF(errors);
    if (!gfd_topology_error)
        return NULL;
    if (gfd_encode_init() < 0 || gfd_cells_init() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&builder_module);
    if (!module)
        return NULL;
    if (PyModule_AddIntConstant(module, "MAX_GPUS", MAX_GPUS) < 0 ||
        PyModule_AddIntConstant(module, "MAX_ACTIVE_LINKS", MAX_ACTIVE_LINKS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
