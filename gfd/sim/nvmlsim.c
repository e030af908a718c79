/*
 * nvmlsim: a stand-in for libnvidia-ml.so.1 that serves a simulated machine.
 *
 * This library exports the part of the NVML C ABI that gfd (through pynvml) and
 * similar consumers use, compiled against the real nvml.h, with NVML's return
 * codes, struct versions, reference-counted init and call semantics. What it
 * serves comes from a machine description written by gfd.sim (Python) as a
 * line-oriented text file; this file never parses YAML.
 *
 * Configuration
 * -------------
 *   int gfdsim_configure(const char *config_path)
 *       Load a machine description; 0 on success, -1 on error (then
 *       gfdsim_last_error() says which file, line and problem). NULL unloads the
 *       machine. Callable again at any time: handles from the previous machine
 *       become invalid, call counters and fault state start from zero, and the
 *       init reference count is kept.
 *   const char *gfdsim_last_error(void)
 *       The message of the last failed gfdsim_configure ("" when none).
 *   Environment: when nothing was configured, nvmlInit* reads the file named by
 *       GFD_SIM_CONFIG. Without either, nvmlInit* returns
 *       NVML_ERROR_DRIVER_NOT_LOADED, like a machine without the driver.
 *
 * Config file format (version 1)
 * ------------------------------
 * UTF-8 text, one record per line (at most 64 KiB): a keyword, one space, its value. Blank
 * lines and lines starting with '#' are ignored. Numbers are C integers (decimal,
 * or hex with 0x). A "-" in a numeric slot means "not reported". A key that does
 * not appear means NVML reports NOT_SUPPORTED for it. TEXT runs to the end of the
 * line and may contain spaces.
 *
 *   gfdsim-config 1                       first record, always
 *   driver_version TEXT                   nvmlSystemGetDriverVersion
 *   cuda_driver_version N                 nvmlSystemGetCudaDriverVersion (12040 = 12.4)
 *   gpu INDEX                             starts a GPU; indices are 0, 1, 2, ... in order
 *     name TEXT                           keys below apply to the last "gpu" line
 *     uuid TEXT
 *     bus_id DDDDDDDD:BB:DD.F             NVML form, required for every GPU
 *     pci_device_id N                     (device << 16) | vendor
 *     pci_class N                         0x030200 3D controller, 0x030000 VGA
 *     memory_total_bytes N
 *     compute_capability MAJOR MINOR
 *     architecture N                      nvmlDeviceArchitecture_t
 *     brand N                             nvmlBrandType_t
 *     gpu_numa_id N                       nvmlDeviceGetNumaNodeId
 *     cpu_affinity CPULIST                e.g. 0-47,96-143 (may be empty: no CPUs)
 *     mig_mode CURRENT PENDING            0/1 each; absent: the GPU cannot do MIG
 *     max_mig_devices N                   nvmlDeviceGetMaxMigDeviceCount when MIG is on
 *     nvlink_version N                    nvmlNvLinkVersion enum
 *     nvlink INDEX ACTIVE REMOTE_BUS|- REMOTE_TYPE|-
 *     fabric UUID_HEX32 CLIQUE STATE STATUS HEALTH_MASK|-
 *     mig INDEX                           starts a MIG device of the current GPU
 *       mig_uuid TEXT                     mig_* keys apply to the last "mig" line
 *       mig_name TEXT
 *       mig_memory_total_bytes N
 *       mig_instance GPU_INSTANCE_ID COMPUTE_INSTANCE_ID
 *       mig_gi_profile PROFILE_ID PROFILE_INDEX SLICES MEMORY_MIB
 *       mig_ci_profile SLICES MULTIPROCESSORS
 *       mig_engines COPY DECODERS ENCODERS JPEG OFA
 *       mig_media_extensions 0|1
 *   pair A B LEVEL                        nvmlDeviceGetTopologyCommonAncestor, a < b
 *   fault_error CALL CODE GPU|- TIMES|-   CALL (an exported symbol) returns CODE, for
 *                                         one GPU or any, the first TIMES matches or always
 *   fault_gpu_lost GPU AFTER_CALLS        after that many calls on the GPU, every later
 *                                         call on it returns NVML_ERROR_GPU_IS_LOST
 *   fault_driver_not_loaded INITS         the first INITS nvmlInit* calls fail
 *
 * Every exported call is serialised by one mutex, so threads see NVML-like
 * consistency. Handles are pointers into this library's tables, compared by
 * address before use, so a stale or foreign handle yields INVALID_ARGUMENT
 * rather than a crash.
 */

#define _POSIX_C_SOURCE 200809L

#include <nvml.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GFDSIM_API __attribute__((visibility("default")))
#define CONFIG_ENV "GFD_SIM_CONFIG"
#define CONFIG_MAGIC "gfdsim-config 1"
#define MAX_LINE 65536 /* a cpulist of 4096 lone CPUs is about 20 KB */
#define TEXT_MAX NVML_DEVICE_NAME_V2_BUFFER_SIZE
#define BUS_ID_MAX NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
#define CALL_NAME_MAX 80
#define DEFAULT_MAX_MIG_DEVICES 7
#define BITS_PER_WORD (sizeof(unsigned long) * CHAR_BIT)

/* Handle types the header leaves opaque. Only their addresses are used. */
struct nvmlDevice_st {
    int gpu;
    int mig; /* -1: the physical GPU */
};
struct nvmlGpuInstance_st {
    int gpu;
    int mig;
};
struct nvmlComputeInstance_st {
    int gpu;
    int mig;
};

typedef struct {
    int index;
    int active;
    int has_remote_bus;
    char remote_bus[BUS_ID_MAX];
    int has_remote_type;
    unsigned remote_type;
} sim_link;

typedef struct {
    struct nvmlDevice_st handle;
    struct nvmlGpuInstance_st gi_handle;
    struct nvmlComputeInstance_st ci_handle;
    unsigned index;
    char uuid[TEXT_MAX];
    char name[TEXT_MAX];
    int has_memory;
    unsigned long long memory;
    unsigned gi_id, ci_id;
    unsigned gi_profile_id, gi_profile_index, gi_slices;
    unsigned long long gi_memory_mib;
    unsigned ci_slices, multiprocessors;
    unsigned copy_engines, decoders, encoders, jpeg, ofa;
    int media_extensions;
} sim_mig;

typedef struct {
    struct nvmlDevice_st handle;
    char name[TEXT_MAX];
    int has_name;
    char uuid[TEXT_MAX];
    int has_uuid;
    char bus_id[BUS_ID_MAX];
    unsigned domain, bus, device, function;
    int has_pci_device_id;
    unsigned pci_device_id;
    int has_pci_class;
    unsigned pci_class;
    int has_memory;
    unsigned long long memory;
    int has_compute;
    int compute_major, compute_minor;
    int has_architecture;
    unsigned architecture;
    int has_brand;
    unsigned brand;
    int has_gpu_numa_id;
    unsigned gpu_numa_id;
    int has_affinity;
    unsigned long *affinity;
    size_t affinity_words;
    int has_mig_mode;
    unsigned mig_current, mig_pending;
    unsigned max_mig_devices;
    sim_mig *migs;
    size_t n_migs;
    int has_nvlink_version;
    unsigned nvlink_version;
    sim_link *links;
    size_t n_links;
    unsigned link_count; /* highest link index + 1 */
    int has_fabric;
    unsigned char fabric_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned fabric_clique;
    unsigned fabric_state;
    int fabric_status;
    int has_fabric_health;
    unsigned fabric_health;
    /* runtime state */
    unsigned long long calls;
    long long lost_after; /* -1: never */
    int lost;
} sim_gpu;

typedef struct {
    char call[CALL_NAME_MAX];
    int code;
    int gpu;         /* -1: any */
    long long times; /* -1: always */
    long long used;
} sim_fault;

typedef struct {
    int has_driver;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int has_cuda;
    int cuda;
    sim_gpu *gpus;
    size_t n_gpus;
    int *levels; /* n_gpus * n_gpus, -1 unknown */
    sim_fault *faults;
    size_t n_faults;
    long long driver_not_loaded_inits;
    long long init_attempts;
} sim_machine;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static sim_machine *g_machine;
static int g_configured; /* gfdsim_configure was called with a path */
static unsigned g_init_count;
static char g_last_error[1024];

#define LOCK() pthread_mutex_lock(&g_lock)
#define RETURN(rc)                          \
    do {                                    \
        nvmlReturn_t rc_ = (rc);            \
        pthread_mutex_unlock(&g_lock);      \
        return rc_;                         \
    } while (0)

/* ------------------------------------------------------------------------- */
/* Machine lifetime */

static void free_machine(sim_machine *m) {
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        free(m->gpus[i].affinity);
        free(m->gpus[i].migs);
        free(m->gpus[i].links);
    }
    free(m->gpus);
    free(m->levels);
    free(m->faults);
    free(m);
}

/* ------------------------------------------------------------------------- */
/* Parsing */

typedef struct {
    const char *path;
    unsigned line;
    char *error;
    size_t error_size;
} parse_ctx;

static int parse_fail(parse_ctx *ctx, const char *fmt, ...) {
    char detail[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    if (ctx->line > 0) {
        snprintf(ctx->error, ctx->error_size, "%s: line %u: %s", ctx->path, ctx->line, detail);
    } else {
        snprintf(ctx->error, ctx->error_size, "%s: %s", ctx->path, detail);
    }
    return -1;
}

/* Split off the next space-separated token of *cursor. */
static char *next_token(char **cursor) {
    char *s = *cursor;
    while (*s == ' ') {
        s++;
    }
    if (*s == '\0') {
        *cursor = s;
        return NULL;
    }
    char *start = s;
    while (*s != '\0' && *s != ' ') {
        s++;
    }
    if (*s == ' ') {
        *s++ = '\0';
    }
    *cursor = s;
    return start;
}

static int parse_ull(const char *token, unsigned long long *out) {
    if (token == NULL || *token == '\0' || *token == '-') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(token, &end, 0);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_u32(const char *token, unsigned *out) {
    unsigned long long v;
    if (parse_ull(token, &v) != 0 || v > UINT_MAX) {
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

/* Parse `count` unsigned numbers from the rest of the line; no more, no fewer. */
static int parse_numbers(parse_ctx *ctx, const char *key, char *rest, unsigned *out, int count) {
    for (int i = 0; i < count; i++) {
        char *token = next_token(&rest);
        if (token == NULL) {
            return parse_fail(ctx, "%s: expected %d numbers, got %d", key, count, i);
        }
        if (parse_u32(token, &out[i]) != 0) {
            return parse_fail(ctx, "%s: '%s' is not an unsigned number", key, token);
        }
    }
    if (next_token(&rest) != NULL) {
        return parse_fail(ctx, "%s: expected %d numbers, got more", key, count);
    }
    return 0;
}

static int copy_text(parse_ctx *ctx, const char *key, const char *value, char *dest, size_t size) {
    size_t len = strlen(value);
    if (len + 1 > size) {
        return parse_fail(ctx, "%s: '%s' is longer than %zu bytes", key, value, size - 1);
    }
    memcpy(dest, value, len + 1);
    return 0;
}

/* "DDDDDDDD:BB:DD.F" (domain may be shorter); returns 0 and the numbers on success. */
static int parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *device,
                        unsigned *function) {
    unsigned d = 0, b = 0, dev = 0, fn = 0;
    int consumed = 0;
    if (sscanf(text, "%x:%x:%x.%x%n", &d, &b, &dev, &fn, &consumed) == 4 &&
        text[consumed] == '\0') {
        *domain = d;
        *bus = b;
        *device = dev;
        *function = fn;
        return 0;
    }
    consumed = 0;
    if (sscanf(text, "%x:%x:%x%n", &d, &b, &dev, &consumed) == 3 && text[consumed] == '\0') {
        *domain = d;
        *bus = b;
        *device = dev;
        *function = 0;
        return 0;
    }
    consumed = 0;
    if (sscanf(text, "%x:%x.%x%n", &b, &dev, &fn, &consumed) == 3 && text[consumed] == '\0') {
        *domain = 0;
        *bus = b;
        *device = dev;
        *function = fn;
        return 0;
    }
    return -1;
}

static int parse_cpulist(parse_ctx *ctx, const char *text, sim_gpu *gpu) {
    size_t words = 1;
    unsigned long *set = calloc(words, sizeof *set);
    if (set == NULL) {
        return parse_fail(ctx, "out of memory");
    }
    const char *s = text;
    while (*s != '\0') {
        char *end = NULL;
        errno = 0;
        unsigned long lo = strtoul(s, &end, 10);
        if (end == s || errno != 0) {
            free(set);
            return parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
        }
        unsigned long hi = lo;
        s = end;
        if (*s == '-') {
            s++;
            hi = strtoul(s, &end, 10);
            if (end == s || errno != 0 || hi < lo) {
                free(set);
                return parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
            }
            s = end;
        }
        if (hi >= (1UL << 20)) {
            free(set);
            return parse_fail(ctx, "cpu_affinity: CPU %lu is out of range", hi);
        }
        size_t need = hi / BITS_PER_WORD + 1;
        if (need > words) {
            unsigned long *grown = realloc(set, need * sizeof *set);
            if (grown == NULL) {
                free(set);
                return parse_fail(ctx, "out of memory");
            }
            memset(grown + words, 0, (need - words) * sizeof *set);
            set = grown;
            words = need;
        }
        for (unsigned long cpu = lo; cpu <= hi; cpu++) {
            set[cpu / BITS_PER_WORD] |= 1UL << (cpu % BITS_PER_WORD);
        }
        if (*s == ',') {
            s++;
            if (*s == '\0') {
                free(set);
                return parse_fail(ctx, "cpu_affinity: '%s' ends with a comma", text);
            }
        } else if (*s != '\0') {
            free(set);
            return parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
        }
    }
    free(gpu->affinity);
    gpu->affinity = set;
    gpu->affinity_words = words;
    gpu->has_affinity = 1;
    return 0;
}

static void *grow(void *array, size_t count, size_t size) {
    void *grown = realloc(array, (count + 1) * size);
    if (grown != NULL) {
        memset((char *)grown + count * size, 0, size);
    }
    return grown;
}

static int parse_gpu_key(parse_ctx *ctx, sim_gpu *gpu, const char *key, char *value) {
    unsigned n[5];
    if (strcmp(key, "name") == 0) {
        gpu->has_name = 1;
        return copy_text(ctx, key, value, gpu->name, sizeof gpu->name);
    }
    if (strcmp(key, "uuid") == 0) {
        gpu->has_uuid = 1;
        return copy_text(ctx, key, value, gpu->uuid, sizeof gpu->uuid);
    }
    if (strcmp(key, "bus_id") == 0) {
        if (copy_text(ctx, key, value, gpu->bus_id, sizeof gpu->bus_id) != 0) {
            return -1;
        }
        if (parse_bus_id(value, &gpu->domain, &gpu->bus, &gpu->device, &gpu->function) != 0) {
            return parse_fail(ctx, "bus_id: '%s' is not a PCI bus id", value);
        }
        return 0;
    }
    if (strcmp(key, "pci_device_id") == 0) {
        gpu->has_pci_device_id = 1;
        return parse_numbers(ctx, key, value, &gpu->pci_device_id, 1);
    }
    if (strcmp(key, "pci_class") == 0) {
        gpu->has_pci_class = 1;
        return parse_numbers(ctx, key, value, &gpu->pci_class, 1);
    }
    if (strcmp(key, "memory_total_bytes") == 0) {
        gpu->has_memory = 1;
        if (parse_ull(value, &gpu->memory) != 0) {
            return parse_fail(ctx, "%s: '%s' is not an unsigned number", key, value);
        }
        return 0;
    }
    if (strcmp(key, "compute_capability") == 0) {
        if (parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        gpu->has_compute = 1;
        gpu->compute_major = (int)n[0];
        gpu->compute_minor = (int)n[1];
        return 0;
    }
    if (strcmp(key, "architecture") == 0) {
        gpu->has_architecture = 1;
        return parse_numbers(ctx, key, value, &gpu->architecture, 1);
    }
    if (strcmp(key, "brand") == 0) {
        gpu->has_brand = 1;
        return parse_numbers(ctx, key, value, &gpu->brand, 1);
    }
    if (strcmp(key, "gpu_numa_id") == 0) {
        gpu->has_gpu_numa_id = 1;
        return parse_numbers(ctx, key, value, &gpu->gpu_numa_id, 1);
    }
    if (strcmp(key, "cpu_affinity") == 0) {
        return parse_cpulist(ctx, value, gpu);
    }
    if (strcmp(key, "mig_mode") == 0) {
        if (parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        gpu->has_mig_mode = 1;
        gpu->mig_current = n[0] != 0;
        gpu->mig_pending = n[1] != 0;
        return 0;
    }
    if (strcmp(key, "max_mig_devices") == 0) {
        return parse_numbers(ctx, key, value, &gpu->max_mig_devices, 1);
    }
    if (strcmp(key, "nvlink_version") == 0) {
        gpu->has_nvlink_version = 1;
        return parse_numbers(ctx, key, value, &gpu->nvlink_version, 1);
    }
    if (strcmp(key, "nvlink") == 0) {
        char *rest = value;
        char *t_index = next_token(&rest);
        char *t_active = next_token(&rest);
        char *t_bus = next_token(&rest);
        char *t_type = next_token(&rest);
        if (t_type == NULL || next_token(&rest) != NULL) {
            return parse_fail(ctx, "nvlink: expected INDEX ACTIVE REMOTE_BUS|- REMOTE_TYPE|-");
        }
        unsigned index, active;
        if (parse_u32(t_index, &index) != 0 || index >= NVML_NVLINK_MAX_LINKS) {
            return parse_fail(ctx, "nvlink: link index '%s' is not below %d", t_index,
                              NVML_NVLINK_MAX_LINKS);
        }
        if (parse_u32(t_active, &active) != 0 || active > 1) {
            return parse_fail(ctx, "nvlink: ACTIVE must be 0 or 1, got '%s'", t_active);
        }
        for (size_t i = 0; i < gpu->n_links; i++) {
            if (gpu->links[i].index == (int)index) {
                return parse_fail(ctx, "nvlink: link %u is listed twice", index);
            }
        }
        sim_link *links = grow(gpu->links, gpu->n_links, sizeof *links);
        if (links == NULL) {
            return parse_fail(ctx, "out of memory");
        }
        gpu->links = links;
        sim_link *link = &links[gpu->n_links++];
        link->index = (int)index;
        link->active = (int)active;
        if (strcmp(t_bus, "-") != 0) {
            unsigned d, b, dv, f;
            if (parse_bus_id(t_bus, &d, &b, &dv, &f) != 0) {
                return parse_fail(ctx, "nvlink: '%s' is not a PCI bus id", t_bus);
            }
            link->has_remote_bus = 1;
            if (copy_text(ctx, key, t_bus, link->remote_bus, sizeof link->remote_bus) != 0) {
                return -1;
            }
        }
        if (strcmp(t_type, "-") != 0) {
            if (parse_u32(t_type, &link->remote_type) != 0) {
                return parse_fail(ctx, "nvlink: remote type '%s' is not a number", t_type);
            }
            link->has_remote_type = 1;
        }
        if (index + 1 > gpu->link_count) {
            gpu->link_count = index + 1;
        }
        return 0;
    }
    if (strcmp(key, "fabric") == 0) {
        char *rest = value;
        char *t_uuid = next_token(&rest);
        char *t_clique = next_token(&rest);
        char *t_state = next_token(&rest);
        char *t_status = next_token(&rest);
        char *t_health = next_token(&rest);
        if (t_health == NULL || next_token(&rest) != NULL) {
            return parse_fail(ctx, "fabric: expected UUID_HEX32 CLIQUE STATE STATUS HEALTH_MASK|-");
        }
        if (strlen(t_uuid) != 2 * NVML_GPU_FABRIC_UUID_LEN) {
            return parse_fail(ctx, "fabric: cluster UUID '%s' is not 32 hex digits", t_uuid);
        }
        for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) {
            unsigned byte;
            char pair[3] = {t_uuid[2 * i], t_uuid[2 * i + 1], '\0'};
            if (!isxdigit((unsigned char)pair[0]) || !isxdigit((unsigned char)pair[1]) ||
                sscanf(pair, "%2x", &byte) != 1) {
                return parse_fail(ctx, "fabric: cluster UUID '%s' is not 32 hex digits", t_uuid);
            }
            gpu->fabric_uuid[i] = (unsigned char)byte;
        }
        unsigned status;
        if (parse_u32(t_clique, &gpu->fabric_clique) != 0 ||
            parse_u32(t_state, &gpu->fabric_state) != 0 || gpu->fabric_state > 255 ||
            parse_u32(t_status, &status) != 0) {
            return parse_fail(ctx, "fabric: CLIQUE, STATE and STATUS must be unsigned numbers");
        }
        gpu->fabric_status = (int)status;
        gpu->has_fabric_health = strcmp(t_health, "-") != 0;
        if (gpu->has_fabric_health && parse_u32(t_health, &gpu->fabric_health) != 0) {
            return parse_fail(ctx, "fabric: health mask '%s' is not a number", t_health);
        }
        gpu->has_fabric = 1;
        return 0;
    }
    if (strcmp(key, "mig") == 0) {
        unsigned index;
        if (parse_numbers(ctx, key, value, &index, 1) != 0) {
            return -1;
        }
        for (size_t i = 0; i < gpu->n_migs; i++) {
            if (gpu->migs[i].index == index) {
                return parse_fail(ctx, "mig: MIG device %u is listed twice", index);
            }
        }
        sim_mig *migs = grow(gpu->migs, gpu->n_migs, sizeof *migs);
        if (migs == NULL) {
            return parse_fail(ctx, "out of memory");
        }
        gpu->migs = migs;
        migs[gpu->n_migs].index = index;
        gpu->n_migs++;
        return 0;
    }
    if (strncmp(key, "mig_", 4) == 0 && strcmp(key, "mig_mode") != 0) {
        if (gpu->n_migs == 0) {
            return parse_fail(ctx, "%s: comes before any 'mig' line", key);
        }
        sim_mig *mig = &gpu->migs[gpu->n_migs - 1];
        if (strcmp(key, "mig_uuid") == 0) {
            return copy_text(ctx, key, value, mig->uuid, sizeof mig->uuid);
        }
        if (strcmp(key, "mig_name") == 0) {
            return copy_text(ctx, key, value, mig->name, sizeof mig->name);
        }
        if (strcmp(key, "mig_memory_total_bytes") == 0) {
            mig->has_memory = 1;
            if (parse_ull(value, &mig->memory) != 0) {
                return parse_fail(ctx, "%s: '%s' is not an unsigned number", key, value);
            }
            return 0;
        }
        if (strcmp(key, "mig_instance") == 0) {
            if (parse_numbers(ctx, key, value, n, 2) != 0) {
                return -1;
            }
            mig->gi_id = n[0];
            mig->ci_id = n[1];
            return 0;
        }
        if (strcmp(key, "mig_gi_profile") == 0) {
            if (parse_numbers(ctx, key, value, n, 4) != 0) {
                return -1;
            }
            if (n[1] >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
                return parse_fail(ctx, "%s: profile index %u is not below %d", key, n[1],
                                  NVML_GPU_INSTANCE_PROFILE_COUNT);
            }
            mig->gi_profile_id = n[0];
            mig->gi_profile_index = n[1];
            mig->gi_slices = n[2];
            mig->gi_memory_mib = n[3];
            return 0;
        }
        if (strcmp(key, "mig_ci_profile") == 0) {
            if (parse_numbers(ctx, key, value, n, 2) != 0) {
                return -1;
            }
            mig->ci_slices = n[0];
            mig->multiprocessors = n[1];
            return 0;
        }
        if (strcmp(key, "mig_engines") == 0) {
            if (parse_numbers(ctx, key, value, n, 5) != 0) {
                return -1;
            }
            mig->copy_engines = n[0];
            mig->decoders = n[1];
            mig->encoders = n[2];
            mig->jpeg = n[3];
            mig->ofa = n[4];
            return 0;
        }
        if (strcmp(key, "mig_media_extensions") == 0) {
            unsigned me;
            if (parse_numbers(ctx, key, value, &me, 1) != 0) {
                return -1;
            }
            mig->media_extensions = me != 0;
            return 0;
        }
    }
    return parse_fail(ctx, "unknown key '%s'", key);
}

static int parse_fault_error(parse_ctx *ctx, sim_machine *m, char *value) {
    char *rest = value;
    char *t_call = next_token(&rest);
    char *t_code = next_token(&rest);
    char *t_gpu = next_token(&rest);
    char *t_times = next_token(&rest);
    if (t_times == NULL || next_token(&rest) != NULL) {
        return parse_fail(ctx, "fault_error: expected CALL CODE GPU|- TIMES|-");
    }
    sim_fault *faults = grow(m->faults, m->n_faults, sizeof *faults);
    if (faults == NULL) {
        return parse_fail(ctx, "out of memory");
    }
    m->faults = faults;
    sim_fault *f = &faults[m->n_faults++];
    if (copy_text(ctx, "fault_error", t_call, f->call, sizeof f->call) != 0) {
        return -1;
    }
    unsigned code, gpu;
    unsigned long long times;
    if (parse_u32(t_code, &code) != 0 || code == NVML_SUCCESS || code > INT_MAX) {
        return parse_fail(ctx, "fault_error: '%s' is not an NVML error code", t_code);
    }
    f->code = (int)code;
    f->gpu = -1;
    if (strcmp(t_gpu, "-") != 0) {
        if (parse_u32(t_gpu, &gpu) != 0 || gpu > INT_MAX) {
            return parse_fail(ctx, "fault_error: GPU '%s' is not an index", t_gpu);
        }
        f->gpu = (int)gpu;
    }
    f->times = -1;
    if (strcmp(t_times, "-") != 0) {
        if (parse_ull(t_times, &times) != 0 || times > LLONG_MAX) {
            return parse_fail(ctx, "fault_error: TIMES '%s' is not a count", t_times);
        }
        f->times = (long long)times;
    }
    return 0;
}

static int parse_line(parse_ctx *ctx, sim_machine *m, char *line) {
    char *rest = line;
    char *key = next_token(&rest);
    char *value = rest;
    unsigned n[3];
    sim_gpu *current = m->n_gpus > 0 ? &m->gpus[m->n_gpus - 1] : NULL;

    if (strcmp(key, "driver_version") == 0) {
        m->has_driver = 1;
        return copy_text(ctx, key, value, m->driver, sizeof m->driver);
    }
    if (strcmp(key, "cuda_driver_version") == 0) {
        if (parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        if (n[0] > INT_MAX) {
            return parse_fail(ctx, "%s: %u is too large", key, n[0]);
        }
        m->has_cuda = 1;
        m->cuda = (int)n[0];
        return 0;
    }
    if (strcmp(key, "gpu") == 0) {
        if (parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        if (n[0] != m->n_gpus) {
            return parse_fail(ctx, "gpu: expected GPU %zu next, got %u", m->n_gpus, n[0]);
        }
        sim_gpu *gpus = grow(m->gpus, m->n_gpus, sizeof *gpus);
        if (gpus == NULL) {
            return parse_fail(ctx, "out of memory");
        }
        m->gpus = gpus;
        gpus[m->n_gpus].lost_after = -1;
        m->n_gpus++;
        return 0;
    }
    if (current == NULL) {
        static const char *const gpu_keys[] = {
            "name", "uuid", "bus_id", "pci_device_id", "pci_class", "memory_total_bytes",
            "compute_capability", "architecture", "brand", "gpu_numa_id", "cpu_affinity",
            "mig_mode", "max_mig_devices", "nvlink_version", "nvlink", "fabric", "mig"};
        for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++) {
            if (strcmp(key, gpu_keys[i]) == 0 || strncmp(key, "mig_", 4) == 0) {
                return parse_fail(ctx, "'%s' comes before any 'gpu' line", key);
            }
        }
        return parse_fail(ctx, "unknown key '%s'", key);
    }
    return parse_gpu_key(ctx, current, key, value);
}

static int parse_late_line(parse_ctx *ctx, sim_machine *m, char *line) {
    char *rest = line;
    char *key = next_token(&rest);
    char *value = rest;
    unsigned n[3];
    if (strcmp(key, "pair") == 0) {
        if (parse_numbers(ctx, key, value, n, 3) != 0) {
            return -1;
        }
        if (!(n[0] < n[1] && n[1] < m->n_gpus)) {
            return parse_fail(ctx, "pair: %u %u must be two GPU indices a < b below %zu", n[0],
                              n[1], m->n_gpus);
        }
        switch (n[2]) {
        case NVML_TOPOLOGY_INTERNAL:
        case NVML_TOPOLOGY_SINGLE:
        case NVML_TOPOLOGY_MULTIPLE:
        case NVML_TOPOLOGY_HOSTBRIDGE:
        case NVML_TOPOLOGY_NODE:
        case NVML_TOPOLOGY_SYSTEM:
            break;
        default:
            return parse_fail(ctx, "pair: %u is not an nvmlGpuTopologyLevel_t", n[2]);
        }
        m->levels[n[0] * m->n_gpus + n[1]] = (int)n[2];
        m->levels[n[1] * m->n_gpus + n[0]] = (int)n[2];
        return 0;
    }
    if (strcmp(key, "fault_error") == 0) {
        if (parse_fault_error(ctx, m, value) != 0) {
            return -1;
        }
        int gpu = m->faults[m->n_faults - 1].gpu;
        if (gpu >= 0 && (size_t)gpu >= m->n_gpus) {
            return parse_fail(ctx, "fault_error: GPU %d does not exist", gpu);
        }
        return 0;
    }
    if (strcmp(key, "fault_gpu_lost") == 0) {
        if (parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        if (n[0] >= m->n_gpus) {
            return parse_fail(ctx, "fault_gpu_lost: GPU %u does not exist", n[0]);
        }
        m->gpus[n[0]].lost_after = n[1];
        return 0;
    }
    if (strcmp(key, "fault_driver_not_loaded") == 0) {
        if (parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        m->driver_not_loaded_inits = n[0];
        return 0;
    }
    return parse_fail(ctx, "unknown key '%s'", key);
}

/* Read a whole config file into lines; return a machine or NULL with ctx->error set. */
static sim_machine *load_machine(const char *path, char *error, size_t error_size) {
    parse_ctx ctx = {path, 0, error, error_size};
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        parse_fail(&ctx, "cannot open: %s", strerror(errno));
        return NULL;
    }
    sim_machine *m = calloc(1, sizeof *m);
    char **late = NULL;
    unsigned *late_lines = NULL;
    size_t n_late = 0;
    char *buffer = malloc(MAX_LINE);
    int ok = m != NULL && buffer != NULL ? 0 : parse_fail(&ctx, "out of memory");
    int seen_magic = 0;
    while (ok == 0 && fgets(buffer, MAX_LINE, file) != NULL) {
        ctx.line++;
        size_t len = strlen(buffer);
        if (len > 0 && buffer[len - 1] != '\n' && !feof(file)) {
            ok = parse_fail(&ctx, "line is longer than %d bytes", MAX_LINE - 2);
            break;
        }
        while (len > 0 && (buffer[len - 1] == '\n' || buffer[len - 1] == '\r')) {
            buffer[--len] = '\0';
        }
        if (len == 0 || buffer[0] == '#') {
            continue;
        }
        if (!seen_magic) {
            if (strcmp(buffer, CONFIG_MAGIC) != 0) {
                ok = parse_fail(&ctx, "expected '%s' as the first record", CONFIG_MAGIC);
                break;
            }
            seen_magic = 1;
            continue;
        }
        /* pair and fault records name GPUs: read them once all GPUs are known. */
        int late_record = strncmp(buffer, "pair ", 5) == 0 || strncmp(buffer, "fault_", 6) == 0;
        if (!late_record) {
            ok = parse_line(&ctx, m, buffer);
        } else {
            char **grown = realloc(late, (n_late + 1) * sizeof *late);
            unsigned *grown_lines = realloc(late_lines, (n_late + 1) * sizeof *late_lines);
            if (grown != NULL) {
                late = grown;
            }
            if (grown_lines != NULL) {
                late_lines = grown_lines;
            }
            if (grown == NULL || grown_lines == NULL || (late[n_late] = strdup(buffer)) == NULL) {
                ok = parse_fail(&ctx, "out of memory");
            } else {
                late_lines[n_late++] = ctx.line;
            }
        }
    }
    if (ok == 0 && ferror(file)) {
        ok = parse_fail(&ctx, "read error: %s", strerror(errno));
    }
    fclose(file);
    if (ok == 0 && !seen_magic) {
        ctx.line = 0;
        ok = parse_fail(&ctx, "empty file; expected '%s' as the first record", CONFIG_MAGIC);
    }
    if (ok == 0) {
        size_t cells = m->n_gpus * m->n_gpus;
        m->levels = malloc((cells > 0 ? cells : 1) * sizeof *m->levels);
        if (m->levels == NULL) {
            ok = parse_fail(&ctx, "out of memory");
        } else {
            for (size_t i = 0; i < cells; i++) {
                m->levels[i] = -1;
            }
            for (size_t i = 0; i < m->n_gpus; i++) {
                m->levels[i * m->n_gpus + i] = NVML_TOPOLOGY_INTERNAL;
            }
        }
    }
    for (size_t i = 0; ok == 0 && i < n_late; i++) {
        ctx.line = late_lines[i];
        ok = parse_late_line(&ctx, m, late[i]);
    }
    for (size_t i = 0; ok == 0 && i < m->n_gpus; i++) {
        sim_gpu *gpu = &m->gpus[i];
        ctx.line = 0;
        if (gpu->bus_id[0] == '\0') {
            ok = parse_fail(&ctx, "GPU %zu has no bus_id", i);
        }
        gpu->handle.gpu = (int)i;
        gpu->handle.mig = -1;
        for (size_t j = 0; j < gpu->n_migs; j++) {
            sim_mig *mig = &gpu->migs[j];
            mig->handle = (struct nvmlDevice_st){(int)i, (int)j};
            mig->gi_handle = (struct nvmlGpuInstance_st){(int)i, (int)j};
            mig->ci_handle = (struct nvmlComputeInstance_st){(int)i, (int)j};
        }
    }
    free(buffer);
    for (size_t i = 0; i < n_late; i++) {
        free(late[i]);
    }
    free(late);
    free(late_lines);
    if (ok != 0) {
        free_machine(m);
        return NULL;
    }
    return m;
}

GFDSIM_API int gfdsim_configure(const char *config_path) {
    LOCK();
    sim_machine *m = NULL;
    if (config_path != NULL) {
        char error[sizeof g_last_error];
        m = load_machine(config_path, error, sizeof error);
        if (m == NULL) {
            memcpy(g_last_error, error, sizeof g_last_error);
            pthread_mutex_unlock(&g_lock);
            return -1;
        }
    }
    free_machine(g_machine);
    g_machine = m;
    g_configured = config_path != NULL;
    g_last_error[0] = '\0';
    pthread_mutex_unlock(&g_lock);
    return 0;
}

GFDSIM_API const char *gfdsim_last_error(void) {
    return g_last_error;
}

/* ------------------------------------------------------------------------- */
/* Call admission: init state, handles, lost GPUs and injected errors */

static int find_gpu(nvmlDevice_t device, sim_gpu **gpu, sim_mig **mig) {
    if (g_machine == NULL || device == NULL) {
        return 0;
    }
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        sim_gpu *g = &g_machine->gpus[i];
        if (device == &g->handle) {
            *gpu = g;
            *mig = NULL;
            return 1;
        }
        for (size_t j = 0; j < g->n_migs; j++) {
            if (device == &g->migs[j].handle) {
                *gpu = g;
                *mig = &g->migs[j];
                return 1;
            }
        }
    }
    return 0;
}

static nvmlReturn_t injected(const char *call, const int *gpus, int n_gpus) {
    for (size_t i = 0; i < g_machine->n_faults; i++) {
        sim_fault *f = &g_machine->faults[i];
        if (strcmp(f->call, call) != 0 || (f->times >= 0 && f->used >= f->times)) {
            continue;
        }
        int matches = f->gpu < 0;
        for (int k = 0; k < n_gpus && !matches; k++) {
            matches = f->gpu == gpus[k];
        }
        if (matches) {
            f->used++;
            return (nvmlReturn_t)f->code;
        }
    }
    return NVML_SUCCESS;
}

/* Count a call on each GPU it names; a GPU past its lost_after is gone for good. */
static nvmlReturn_t admit(const char *call, const int *gpus, int n_gpus) {
    for (int k = 0; k < n_gpus; k++) {
        if (g_machine->gpus[gpus[k]].lost) {
            return NVML_ERROR_GPU_IS_LOST;
        }
    }
    nvmlReturn_t lost = NVML_SUCCESS;
    for (int k = 0; k < n_gpus; k++) {
        sim_gpu *g = &g_machine->gpus[gpus[k]];
        g->calls++;
        if (g->lost_after >= 0 && g->calls > (unsigned long long)g->lost_after) {
            g->lost = 1;
            lost = NVML_ERROR_GPU_IS_LOST;
        }
    }
    if (lost != NVML_SUCCESS) {
        return lost;
    }
    return injected(call, gpus, n_gpus);
}

static nvmlReturn_t enter_system(const char *call) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return admit(call, NULL, 0);
}

/* Resolve a device handle (physical or MIG) and admit the call on its GPU. */
static nvmlReturn_t enter_device(const char *call, nvmlDevice_t device, sim_gpu **gpu,
                                 sim_mig **mig) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!find_gpu(device, gpu, mig)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int index = (*gpu)->handle.gpu;
    return admit(call, &index, 1);
}

/* Like enter_device, but MIG handles are not accepted for this query. */
static nvmlReturn_t enter_physical(const char *call, nvmlDevice_t device, sim_gpu **gpu) {
    sim_mig *mig = NULL;
    nvmlReturn_t rc = enter_device(call, device, gpu, &mig);
    if (rc == NVML_SUCCESS && mig != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

static nvmlReturn_t enter_pair(const char *call, nvmlDevice_t a, nvmlDevice_t b, sim_gpu **ga,
                               sim_gpu **gb) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_mig *ma = NULL, *mb = NULL;
    if (!find_gpu(a, ga, &ma) || !find_gpu(b, gb, &mb)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int indices[2] = {(*ga)->handle.gpu, (*gb)->handle.gpu};
    nvmlReturn_t rc = admit(call, indices, indices[0] == indices[1] ? 1 : 2);
    if (rc == NVML_SUCCESS && (ma != NULL || mb != NULL)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

static int find_gpu_instance(nvmlGpuInstance_t gi, sim_gpu **gpu, sim_mig **mig) {
    if (g_machine == NULL || gi == NULL) {
        return 0;
    }
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        for (size_t j = 0; j < g_machine->gpus[i].n_migs; j++) {
            if (gi == &g_machine->gpus[i].migs[j].gi_handle) {
                *gpu = &g_machine->gpus[i];
                *mig = &g_machine->gpus[i].migs[j];
                return 1;
            }
        }
    }
    return 0;
}

static int find_compute_instance(nvmlComputeInstance_t ci, sim_gpu **gpu, sim_mig **mig) {
    if (g_machine == NULL || ci == NULL) {
        return 0;
    }
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        for (size_t j = 0; j < g_machine->gpus[i].n_migs; j++) {
            if (ci == &g_machine->gpus[i].migs[j].ci_handle) {
                *gpu = &g_machine->gpus[i];
                *mig = &g_machine->gpus[i].migs[j];
                return 1;
            }
        }
    }
    return 0;
}

static nvmlReturn_t enter_instance(const char *call, sim_gpu *gpu) {
    int index = gpu->handle.gpu;
    return admit(call, &index, 1);
}

/* The MIG device that represents a GPU instance: the first one with that id. */
static sim_mig *gpu_instance_owner(const sim_gpu *gpu, unsigned gi_id) {
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].gi_id == gi_id) {
            return &gpu->migs[j];
        }
    }
    return NULL;
}

static nvmlReturn_t copy_string(const char *value, char *dest, unsigned length) {
    size_t len = strlen(value);
    if (length < len + 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(dest, value, len + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Init and shutdown */

static nvmlReturn_t init_common(const char *call) {
    if (!g_configured && g_machine == NULL) {
        const char *path = getenv(CONFIG_ENV);
        if (path == NULL || *path == '\0') {
            return NVML_ERROR_DRIVER_NOT_LOADED;
        }
        char error[sizeof g_last_error];
        g_machine = load_machine(path, error, sizeof error);
        if (g_machine == NULL) {
            memcpy(g_last_error, error, sizeof g_last_error);
            fprintf(stderr, "gfdsim: %s (from %s)\n", error, CONFIG_ENV);
            return NVML_ERROR_UNKNOWN;
        }
    }
    if (g_machine == NULL) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    g_machine->init_attempts++;
    if (g_machine->init_attempts <= g_machine->driver_not_loaded_inits) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    nvmlReturn_t rc = injected(call, NULL, 0);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    g_init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    LOCK();
    RETURN(init_common(__func__));
}

nvmlReturn_t nvmlInit_v2(void) {
    LOCK();
    RETURN(init_common(__func__));
}

nvmlReturn_t nvmlInit(void) {
    LOCK();
    RETURN(init_common(__func__));
}

nvmlReturn_t nvmlShutdown(void) {
    LOCK();
    if (g_init_count == 0) {
        RETURN(NVML_ERROR_UNINITIALIZED);
    }
    nvmlReturn_t rc = g_machine != NULL ? injected(__func__, NULL, 0) : NVML_SUCCESS;
    g_init_count--;
    RETURN(rc);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, because ECC is "
               "enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------------- */
/* System queries */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    LOCK();
    nvmlReturn_t rc = enter_system(__func__);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (version == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!g_machine->has_driver) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    RETURN(copy_string(g_machine->driver, version, length));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    LOCK();
    nvmlReturn_t rc = enter_system(__func__);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (version == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!g_machine->has_driver) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* NVML reports its own version as the API major followed by the driver version. */
    char text[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 8];
    snprintf(text, sizeof text, "%s.%s", NVML_API_VERSION_STR, g_machine->driver);
    RETURN(copy_string(text, version, length));
}

static nvmlReturn_t cuda_version(const char *call, int *cudaDriverVersion) {
    nvmlReturn_t rc = enter_system(call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (cudaDriverVersion == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!g_machine->has_cuda) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *cudaDriverVersion = g_machine->cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    LOCK();
    RETURN(cuda_version(__func__, cudaDriverVersion));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    LOCK();
    RETURN(cuda_version(__func__, cudaDriverVersion));
}

static int affinity_has_cpu(const sim_gpu *gpu, unsigned cpu) {
    size_t word = cpu / BITS_PER_WORD;
    return gpu->has_affinity && word < gpu->affinity_words &&
           (gpu->affinity[word] >> (cpu % BITS_PER_WORD)) & 1UL;
}

/* Shared by the two "count 0 first, then the array" calls. */
static nvmlReturn_t fill_device_array(nvmlDevice_t *matches, unsigned found, unsigned *count,
                                      nvmlDevice_t *deviceArray) {
    if (*count == 0) {
        *count = found;
        return NVML_SUCCESS;
    }
    if (deviceArray == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*count < found) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < found; i++) {
        deviceArray[i] = matches[i];
    }
    *count = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                         nvmlDevice_t *deviceArray) {
    LOCK();
    nvmlReturn_t rc = enter_system(__func__);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (count == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlDevice_t *matches = calloc(g_machine->n_gpus + 1, sizeof *matches);
    if (matches == NULL) {
        RETURN(NVML_ERROR_MEMORY);
    }
    unsigned found = 0;
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        if (affinity_has_cpu(&g_machine->gpus[i], cpuNumber)) {
            matches[found++] = &g_machine->gpus[i].handle;
        }
    }
    rc = fill_device_array(matches, found, count, deviceArray);
    free(matches);
    RETURN(rc);
}

/* ------------------------------------------------------------------------- */
/* Device enumeration */

static nvmlReturn_t device_count(const char *call, unsigned int *deviceCount) {
    nvmlReturn_t rc = enter_system(call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = (unsigned)g_machine->n_gpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    LOCK();
    RETURN(device_count(__func__, deviceCount));
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    LOCK();
    RETURN(device_count(__func__, deviceCount));
}

static nvmlReturn_t handle_by_index(const char *call, unsigned int index, nvmlDevice_t *device) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (device == NULL || index >= g_machine->n_gpus) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int gpu = (int)index;
    nvmlReturn_t rc = admit(call, &gpu, 1);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *device = &g_machine->gpus[index].handle;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    LOCK();
    RETURN(handle_by_index(__func__, index, device));
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    LOCK();
    RETURN(handle_by_index(__func__, index, device));
}

static nvmlReturn_t handle_by_bus_id(const char *call, const char *pciBusId,
                                     nvmlDevice_t *device) {
    nvmlReturn_t rc = enter_system(call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    unsigned d, b, dv, f;
    if (pciBusId == NULL || device == NULL || parse_bus_id(pciBusId, &d, &b, &dv, &f) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        sim_gpu *g = &g_machine->gpus[i];
        if (g->domain == d && g->bus == b && g->device == dv && g->function == f) {
            if (g->lost) {
                return NVML_ERROR_GPU_IS_LOST;
            }
            *device = &g->handle;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    LOCK();
    RETURN(handle_by_bus_id(__func__, pciBusId, device));
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    LOCK();
    RETURN(handle_by_bus_id(__func__, pciBusId, device));
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    LOCK();
    nvmlReturn_t rc = enter_system(__func__);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (uuid == NULL || device == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        sim_gpu *g = &g_machine->gpus[i];
        if (g->has_uuid && strcmp(g->uuid, uuid) == 0) {
            if (g->lost) {
                RETURN(NVML_ERROR_GPU_IS_LOST);
            }
            *device = &g->handle;
            RETURN(NVML_SUCCESS);
        }
        for (size_t j = 0; j < g->n_migs; j++) {
            if (g->migs[j].uuid[0] != '\0' && strcmp(g->migs[j].uuid, uuid) == 0) {
                if (g->lost) {
                    RETURN(NVML_ERROR_GPU_IS_LOST);
                }
                *device = &g->migs[j].handle;
                RETURN(NVML_SUCCESS);
            }
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (index == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *index = (unsigned)gpu->handle.gpu;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (minorNumber == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    /* /dev/nvidiaN numbering follows the enumeration order on a simulated machine. */
    *minorNumber = (unsigned)gpu->handle.gpu;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Identity */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (name == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig != NULL) {
        RETURN(mig->name[0] != '\0' ? copy_string(mig->name, name, length)
                                    : NVML_ERROR_NOT_SUPPORTED);
    }
    RETURN(gpu->has_name ? copy_string(gpu->name, name, length) : NVML_ERROR_NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (uuid == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig != NULL) {
        RETURN(mig->uuid[0] != '\0' ? copy_string(mig->uuid, uuid, length)
                                    : NVML_ERROR_NOT_SUPPORTED);
    }
    RETURN(gpu->has_uuid ? copy_string(gpu->uuid, uuid, length) : NVML_ERROR_NOT_SUPPORTED);
}

static void fill_pci(const sim_gpu *gpu, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu->domain;
    pci->bus = gpu->bus;
    pci->device = gpu->device;
    pci->pciDeviceId = gpu->has_pci_device_id ? gpu->pci_device_id : 0;
    pci->pciSubSystemId = 0;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", gpu->domain, gpu->bus,
             gpu->device, gpu->function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X",
             gpu->domain & 0xFFFFu, gpu->bus & 0xFFu, gpu->device & 0xFFu,
             gpu->function & 0xFu);
}

static nvmlReturn_t pci_info(const char *call, nvmlDevice_t device, nvmlPciInfo_t *pci) {
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(call, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    fill_pci(gpu, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    LOCK();
    RETURN(pci_info(__func__, device, pci));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    LOCK();
    RETURN(pci_info(__func__, device, pci));
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    LOCK();
    RETURN(pci_info(__func__, device, pci));
}

/* ------------------------------------------------------------------------- */
/* Memory, compute, architecture, brand */

static int memory_of(const sim_gpu *gpu, const sim_mig *mig, unsigned long long *total) {
    if (mig != NULL) {
        *total = mig->memory;
        return mig->has_memory;
    }
    *total = gpu->memory;
    return gpu->has_memory;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (memory == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* An idle simulated GPU: nothing allocated, nothing reserved. */
    memory->total = total;
    memory->free = total;
    memory->used = 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (memory == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (memory->version != nvmlMemory_v2) {
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    memory->total = total;
    memory->reserved = 0;
    memory->free = total;
    memory->used = 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (major == NULL || minor == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_compute) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *major = gpu->compute_major;
    *minor = gpu->compute_minor;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (arch == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_architecture) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *arch = gpu->architecture;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (type == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_brand) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *type = (nvmlBrandType_t)gpu->brand;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (mode == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *mode = NVML_COMPUTEMODE_DEFAULT;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (display == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    /* A VGA-class function drives a display; a 3D controller has no display engine. */
    int vga = gpu->has_pci_class && (gpu->pci_class >> 8) == 0x0300;
    *display = vga ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device,
                                             nvmlGpuVirtualizationMode_t *pVirtualMode) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (pVirtualMode == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *pVirtualMode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* NUMA and CPU affinity */

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (node == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_gpu_numa_id) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *node = gpu->gpu_numa_id;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (cpuSetSize == 0 || cpuSet == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_affinity) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* Like NVML, a set too small for the machine's CPUs is filled as far as it goes. */
    for (unsigned i = 0; i < cpuSetSize; i++) {
        cpuSet[i] = i < gpu->affinity_words ? gpu->affinity[i] : 0;
    }
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Topology */

static int level_of(const sim_gpu *a, const sim_gpu *b) {
    return g_machine->levels[(size_t)a->handle.gpu * g_machine->n_gpus + (size_t)b->handle.gpu];
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo) {
    LOCK();
    sim_gpu *a, *b;
    nvmlReturn_t rc = enter_pair(__func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (pathInfo == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    int level = level_of(a, b);
    if (level < 0) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *pathInfo = (nvmlGpuTopologyLevel_t)level;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (count == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
    case NVML_TOPOLOGY_MULTIPLE:
    case NVML_TOPOLOGY_HOSTBRIDGE:
    case NVML_TOPOLOGY_NODE:
    case NVML_TOPOLOGY_SYSTEM:
        break;
    default:
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlDevice_t *matches = calloc(g_machine->n_gpus + 1, sizeof *matches);
    if (matches == NULL) {
        RETURN(NVML_ERROR_MEMORY);
    }
    unsigned found = 0;
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        sim_gpu *other = &g_machine->gpus[i];
        int l = level_of(gpu, other);
        if (other != gpu && l >= 0 && l <= (int)level) {
            matches[found++] = &other->handle;
        }
    }
    rc = fill_device_array(matches, found, count, deviceArray);
    free(matches);
    RETURN(rc);
}

/* Two GPUs share NVLink when a link of one ends at the other, or both reach one switch. */
static int nvlink_connected(const sim_gpu *a, const sim_gpu *b) {
    for (size_t i = 0; i < a->n_links; i++) {
        const sim_link *la = &a->links[i];
        if (!la->active || !la->has_remote_bus) {
            continue;
        }
        if (strcmp(la->remote_bus, b->bus_id) == 0) {
            return 1;
        }
        if (!la->has_remote_type || la->remote_type != NVML_NVLINK_DEVICE_TYPE_SWITCH) {
            continue;
        }
        for (size_t j = 0; j < b->n_links; j++) {
            const sim_link *lb = &b->links[j];
            if (lb->active && lb->has_remote_bus && strcmp(la->remote_bus, lb->remote_bus) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus) {
    LOCK();
    sim_gpu *a, *b;
    nvmlReturn_t rc = enter_pair(__func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (p2pStatus == NULL || a == b || p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    int nvlink = nvlink_connected(a, b) || nvlink_connected(b, a);
    int level = level_of(a, b);
    /* GeForce boards have PCIe peer-to-peer disabled by the driver. */
    int geforce = (a->has_brand && a->brand == NVML_BRAND_GEFORCE) ||
                  (b->has_brand && b->brand == NVML_BRAND_GEFORCE);
    nvmlGpuP2PStatus_t status;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
        status = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        status = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    default:
        if (nvlink && p2pIndex != NVML_P2P_CAPS_INDEX_PCI) {
            status = NVML_P2P_STATUS_OK;
        } else if (geforce) {
            status = NVML_P2P_STATUS_GPU_NOT_SUPPORTED;
        } else if (level < 0) {
            status = NVML_P2P_STATUS_UNKNOWN;
        } else if (level >= NVML_TOPOLOGY_SYSTEM) {
            /* PCIe peer traffic does not cross the inter-socket link. */
            status = NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
        } else {
            status = NVML_P2P_STATUS_OK;
        }
        break;
    }
    *p2pStatus = status;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* NVLink */

static const sim_link *find_link(const sim_gpu *gpu, unsigned link) {
    for (size_t i = 0; i < gpu->n_links; i++) {
        if (gpu->links[i].index == (int)link) {
            return &gpu->links[i];
        }
    }
    return NULL;
}

/* Resolve the GPU and link for a per-link query; *out is NULL for an unlisted link. */
static nvmlReturn_t enter_link(const char *call, nvmlDevice_t device, unsigned link,
                               const void *result, sim_gpu **gpu, const sim_link **out) {
    nvmlReturn_t rc = enter_physical(call, device, gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (result == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((*gpu)->link_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= (*gpu)->link_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = find_link(*gpu, link);
    return *out != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive) {
    LOCK();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(__func__, device, link, isActive, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    *isActive = l->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                        unsigned int *version) {
    LOCK();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(__func__, device, link, version, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (!gpu->has_nvlink_version) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *version = gpu->nvlink_version;
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t remote_pci(const char *call, nvmlDevice_t device, unsigned int link,
                               nvmlPciInfo_t *pci) {
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(call, device, link, pci, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!l->has_remote_bus) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    sim_gpu remote;
    memset(&remote, 0, sizeof remote);
    parse_bus_id(l->remote_bus, &remote.domain, &remote.bus, &remote.device, &remote.function);
    /* The peer's device id is known when the peer is a GPU of this machine. */
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        const sim_gpu *g = &g_machine->gpus[i];
        if (g->domain == remote.domain && g->bus == remote.bus && g->device == remote.device &&
            g->function == remote.function) {
            remote.has_pci_device_id = g->has_pci_device_id;
            remote.pci_device_id = g->pci_device_id;
        }
    }
    fill_pci(&remote, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    LOCK();
    RETURN(remote_pci(__func__, device, link, pci));
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              nvmlPciInfo_t *pci) {
    LOCK();
    RETURN(remote_pci(__func__, device, link, pci));
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType) {
    LOCK();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(__func__, device, link, pNvLinkDeviceType, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (!l->has_remote_type) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t)l->remote_type;
    RETURN(NVML_SUCCESS);
}

static long long now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (values == NULL || valuesCount <= 0) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    long long stamp = now_usec();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = stamp;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof v->value);
        if (v->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT && mig == NULL && gpu->link_count > 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = gpu->link_count;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Fabric */

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (gpuFabricInfo == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3) {
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    if (!gpu->has_fabric) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* v2 is a prefix of v3: fill the shared fields through the v2 layout only. */
    nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)gpuFabricInfo;
    memcpy(v2->clusterUuid, gpu->fabric_uuid, sizeof v2->clusterUuid);
    v2->status = (nvmlReturn_t)gpu->fabric_status;
    v2->cliqueId = gpu->fabric_clique;
    v2->state = (nvmlGpuFabricState_t)gpu->fabric_state;
    v2->healthMask = gpu->has_fabric_health ? gpu->fabric_health : 0;
    if (version == nvmlGpuFabricInfo_v3) {
        gpuFabricInfo->healthSummary = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
    }
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (gpuFabricInfo == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_fabric) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    memcpy(gpuFabricInfo->clusterUuid, gpu->fabric_uuid, sizeof gpuFabricInfo->clusterUuid);
    gpuFabricInfo->status = (nvmlReturn_t)gpu->fabric_status;
    gpuFabricInfo->cliqueId = gpu->fabric_clique;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)gpu->fabric_state;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (currentMode == NULL || pendingMode == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *currentMode = gpu->mig_current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = gpu->mig_pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    RETURN(NVML_SUCCESS);
}

static unsigned max_mig_devices(const sim_gpu *gpu) {
    if (!gpu->has_mig_mode || !gpu->mig_current) {
        return 0;
    }
    unsigned max = gpu->max_mig_devices != 0 ? gpu->max_mig_devices : DEFAULT_MAX_MIG_DEVICES;
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].index + 1 > max) {
            max = gpu->migs[j].index + 1;
        }
    }
    return max;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT; /* a MIG handle has no MIG children */
    }
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (count == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *count = max_mig_devices(gpu);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (migDevice == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    if (!gpu->mig_current) {
        RETURN(NVML_ERROR_NOT_FOUND);
    }
    if (index >= max_mig_devices(gpu)) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].index == index) {
            *migDevice = &gpu->migs[j].handle;
            RETURN(NVML_SUCCESS);
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (isMigDevice == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *isMigDevice = mig != NULL;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_device(__func__, migDevice, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (device == NULL || mig == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *device = &gpu->handle;
    RETURN(NVML_SUCCESS);
}

static nvmlReturn_t enter_mig(const char *call, nvmlDevice_t device, const void *out,
                              sim_gpu **gpu, sim_mig **mig) {
    nvmlReturn_t rc = enter_device(call, device, gpu, mig);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return *mig != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(__func__, device, id, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    *id = mig->gi_id;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(__func__, device, id, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    *id = mig->ci_id;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(__func__, device, attributes, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    attributes->multiprocessorCount = mig->multiprocessors;
    attributes->sharedCopyEngineCount = mig->copy_engines;
    attributes->sharedDecoderCount = mig->decoders;
    attributes->sharedEncoderCount = mig->encoders;
    attributes->sharedJpegCount = mig->jpeg;
    attributes->sharedOfaCount = mig->ofa;
    attributes->gpuInstanceSliceCount = mig->gi_slices;
    attributes->computeInstanceSliceCount = mig->ci_slices;
    attributes->memorySizeMB = mig->gi_memory_mib;
    RETURN(NVML_SUCCESS);
}

/* The MIG device describing GPU instance profile `profile` (an index) on this GPU. */
static const sim_mig *gi_profile_of(const sim_gpu *gpu, unsigned profile) {
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].gi_profile_index == profile) {
            return &gpu->migs[j];
        }
    }
    return NULL;
}

/* Multiprocessors of a whole GPU instance, scaled from its compute instance. */
static unsigned gi_multiprocessors(const sim_mig *mig) {
    if (mig->ci_slices == 0 || mig->ci_slices == mig->gi_slices) {
        return mig->multiprocessors;
    }
    return mig->multiprocessors * mig->gi_slices / mig->ci_slices;
}

static unsigned gi_instance_count(const sim_gpu *gpu, const sim_mig *mig) {
    unsigned slices = max_mig_devices(gpu);
    if (slices == 0) {
        slices = gpu->max_mig_devices != 0 ? gpu->max_mig_devices : DEFAULT_MAX_MIG_DEVICES;
    }
    return mig->gi_slices != 0 ? slices / mig->gi_slices : 0;
}

static nvmlReturn_t enter_gi_profile(const char *call, nvmlDevice_t device, unsigned profile,
                                     const void *info, sim_gpu **gpu, const sim_mig **mig) {
    nvmlReturn_t rc = enter_physical(call, device, gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (info == NULL || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!(*gpu)->has_mig_mode) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *mig = gi_profile_of(*gpu, profile);
    return *mig != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* "MIG 3g.20gb" from a MIG device named "... MIG 1c.3g.20gb" or "... MIG 3g.20gb". */
static void gi_profile_name(const sim_mig *mig, char *out, size_t size) {
    const char *tag = strstr(mig->name, "MIG ");
    if (tag != NULL) {
        const char *profile = tag + 4;
        const char *dot = strchr(profile, '.');
        if (dot != NULL && dot > profile && dot[-1] == 'c' && strchr(dot + 1, 'g') != NULL) {
            profile = dot + 1;
        }
        snprintf(out, size, "MIG %s", profile);
    } else {
        snprintf(out, size, "MIG %ug.%llugb%s", mig->gi_slices, (mig->gi_memory_mib + 1023) / 1024,
                 mig->media_extensions ? "+me" : "");
    }
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    LOCK();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_gi_profile(__func__, device, profile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    memset(info, 0, sizeof *info);
    info->id = mig->gi_profile_id;
    info->isP2pSupported = 0;
    info->sliceCount = mig->gi_slices;
    info->instanceCount = gi_instance_count(gpu, mig);
    info->multiprocessorCount = gi_multiprocessors(mig);
    info->copyEngineCount = mig->copy_engines;
    info->decoderCount = mig->decoders;
    info->encoderCount = mig->encoders;
    info->jpegCount = mig->jpeg;
    info->ofaCount = mig->ofa;
    info->memorySizeMB = mig->gi_memory_mib;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    LOCK();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_gi_profile(__func__, device, profile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    unsigned version = info->version;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    gi_profile_name(mig, name, sizeof name);
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = mig->gi_profile_id;
        info->sliceCount = mig->gi_slices;
        info->instanceCount = gi_instance_count(gpu, mig);
        info->multiprocessorCount = gi_multiprocessors(mig);
        info->copyEngineCount = mig->copy_engines;
        info->decoderCount = mig->decoders;
        info->encoderCount = mig->encoders;
        info->jpegCount = mig->jpeg;
        info->ofaCount = mig->ofa;
        info->memorySizeMB = mig->gi_memory_mib;
        memcpy(info->name, name, sizeof info->name);
        RETURN(NVML_SUCCESS);
    }
    if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        memset(v3, 0, sizeof *v3);
        v3->version = version;
        v3->id = mig->gi_profile_id;
        v3->sliceCount = mig->gi_slices;
        v3->instanceCount = gi_instance_count(gpu, mig);
        v3->multiprocessorCount = gi_multiprocessors(mig);
        v3->copyEngineCount = mig->copy_engines;
        v3->decoderCount = mig->decoders;
        v3->encoderCount = mig->encoders;
        v3->jpegCount = mig->jpeg;
        v3->ofaCount = mig->ofa;
        v3->memorySizeMB = mig->gi_memory_mib;
        memcpy(v3->name, name, sizeof v3->name);
        v3->capabilities = 0;
        RETURN(NVML_SUCCESS);
    }
    RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = enter_physical(__func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (gpuInstance == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode || !gpu->mig_current) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    sim_mig *owner = gpu_instance_owner(gpu, id);
    if (owner == NULL) {
        RETURN(NVML_ERROR_NOT_FOUND);
    }
    *gpuInstance = &owner->gi_handle;
    RETURN(NVML_SUCCESS);
}

/* Memory-slice placement: GPU instances laid out in order of their ids. */
static unsigned gi_placement_start(const sim_gpu *gpu, const sim_mig *owner) {
    unsigned start = 0;
    for (size_t j = 0; j < gpu->n_migs; j++) {
        const sim_mig *m = &gpu->migs[j];
        if (m->gi_id < owner->gi_id && gpu_instance_owner(gpu, m->gi_id) == m) {
            start += m->gi_slices;
        }
    }
    return start;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    LOCK();
    if (g_init_count == 0 || g_machine == NULL) {
        RETURN(NVML_ERROR_UNINITIALIZED);
    }
    sim_gpu *gpu;
    sim_mig *mig;
    if (!find_gpu_instance(gpuInstance, &gpu, &mig) || info == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t rc = enter_instance(__func__, gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    memset(info, 0, sizeof *info);
    info->device = &gpu->handle;
    info->id = mig->gi_id;
    info->profileId = mig->gi_profile_id;
    info->placement.start = gi_placement_start(gpu, mig);
    info->placement.size = mig->gi_slices;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
    LOCK();
    if (g_init_count == 0 || g_machine == NULL) {
        RETURN(NVML_ERROR_UNINITIALIZED);
    }
    sim_gpu *gpu;
    sim_mig *owner;
    if (!find_gpu_instance(gpuInstance, &gpu, &owner) || computeInstance == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t rc = enter_instance(__func__, gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].gi_id == owner->gi_id && gpu->migs[j].ci_id == id) {
            *computeInstance = &gpu->migs[j].ci_handle;
            RETURN(NVML_SUCCESS);
        }
    }
    RETURN(NVML_ERROR_NOT_FOUND);
}

/* NVML_COMPUTE_INSTANCE_PROFILE_* index for a compute-slice count; COUNT when none. */
static unsigned ci_profile_index(unsigned slices) {
    switch (slices) {
    case 1: return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
    case 2: return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
    case 3: return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
    case 4: return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
    case 6: return NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE;
    case 7: return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
    case 8: return NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE;
    default: return NVML_COMPUTE_INSTANCE_PROFILE_COUNT;
    }
}

static unsigned ci_placement_start(const sim_gpu *gpu, const sim_mig *mig) {
    unsigned start = 0;
    for (size_t j = 0; j < gpu->n_migs; j++) {
        const sim_mig *m = &gpu->migs[j];
        if (m->gi_id == mig->gi_id && m->ci_id < mig->ci_id) {
            start += m->ci_slices;
        }
    }
    return start;
}

static nvmlReturn_t compute_instance_info(const char *call, nvmlComputeInstance_t computeInstance,
                                          nvmlComputeInstanceInfo_t *info) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_gpu *gpu;
    sim_mig *mig;
    if (!find_compute_instance(computeInstance, &gpu, &mig) || info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = enter_instance(call, gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    memset(info, 0, sizeof *info);
    info->device = &gpu->handle;
    info->gpuInstance = &gpu_instance_owner(gpu, mig->gi_id)->gi_handle;
    info->id = mig->ci_id;
    info->profileId = ci_profile_index(mig->ci_slices);
    info->placement.start = ci_placement_start(gpu, mig);
    info->placement.size = mig->ci_slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t *info) {
    LOCK();
    RETURN(compute_instance_info(__func__, computeInstance, info));
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t *info) {
    LOCK();
    RETURN(compute_instance_info(__func__, computeInstance, info));
}

/* The compute instance of a GPU instance that uses CI profile index `profile`. */
static nvmlReturn_t enter_ci_profile(const char *call, nvmlGpuInstance_t gpuInstance,
                                     unsigned profile, unsigned engProfile, const void *info,
                                     sim_gpu **gpu, const sim_mig **mig) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_mig *owner;
    if (!find_gpu_instance(gpuInstance, gpu, &owner) || info == NULL ||
        profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = enter_instance(call, *gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    for (size_t j = 0; j < (*gpu)->n_migs; j++) {
        const sim_mig *m = &(*gpu)->migs[j];
        if (m->gi_id == owner->gi_id && ci_profile_index(m->ci_slices) == profile) {
            *mig = m;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    LOCK();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_ci_profile(__func__, gpuInstance, profile, engProfile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = mig->ci_slices;
    info->instanceCount = mig->ci_slices != 0 ? mig->gi_slices / mig->ci_slices : 0;
    info->multiprocessorCount = mig->multiprocessors;
    info->sharedCopyEngineCount = mig->copy_engines;
    info->sharedDecoderCount = mig->decoders;
    info->sharedEncoderCount = mig->encoders;
    info->sharedJpegCount = mig->jpeg;
    info->sharedOfaCount = mig->ofa;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info) {
    LOCK();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_ci_profile(__func__, gpuInstance, profile, engProfile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    unsigned version = info->version;
    if (version != nvmlComputeInstanceProfileInfo_v2 &&
        version != nvmlComputeInstanceProfileInfo_v3) {
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    /* v2 is a prefix of v3 (v3 appends capabilities). */
    size_t size = version == nvmlComputeInstanceProfileInfo_v3
                      ? sizeof(nvmlComputeInstanceProfileInfo_v3_t)
                      : sizeof(nvmlComputeInstanceProfileInfo_v2_t);
    memset(info, 0, size);
    info->version = version;
    info->id = profile;
    info->sliceCount = mig->ci_slices;
    info->instanceCount = mig->ci_slices != 0 ? mig->gi_slices / mig->ci_slices : 0;
    info->multiprocessorCount = mig->multiprocessors;
    info->sharedCopyEngineCount = mig->copy_engines;
    info->sharedDecoderCount = mig->decoders;
    info->sharedEncoderCount = mig->encoders;
    info->sharedJpegCount = mig->jpeg;
    info->sharedOfaCount = mig->ofa;
    if (mig->ci_slices == mig->gi_slices) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        gi_profile_name(mig, name, sizeof name);
        memcpy(info->name, name, sizeof info->name);
    } else {
        const char *tag = strstr(mig->name, "MIG ");
        snprintf(info->name, sizeof info->name, "%s", tag != NULL ? tag : "");
    }
    RETURN(NVML_SUCCESS);
}
