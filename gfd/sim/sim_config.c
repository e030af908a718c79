/*
 * sim_config.c: the machine file. Owns the config file format (below), its parser
 * and the two configuration entry points, gfdsim_configure and gfdsim_last_error.
 * The machine it builds (sim_machine, see nvmlsim.h) is what every NVML call serves.
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
 *   nvlink_p2p A B STATUS                 nvmlDeviceGetP2PStatus(NVLINK) of a < b, an
 *                                         nvmlGpuP2PStatus_t; "ok" between GPUs of two
 *                                         NVSwitch fabrics joins the fabrics (trunks), so
 *                                         every pair across them is served "ok" too.
 *                                         Pairs not given are derived: direct links or a
 *                                         shared (or trunk-joined) switch give "ok", else
 *                                         NOT_SUPPORTED
 *   fault_error CALL CODE GPU|- TIMES|-   CALL (an exported symbol) returns CODE, for
 *                                         one GPU or any, the first TIMES matches or always
 *   fault_gpu_lost GPU AFTER_CALLS        after that many calls on the GPU, every later
 *                                         call on it returns NVML_ERROR_GPU_IS_LOST
 *   fault_gpu_vanished GPU AFTER_CALLS    after that many calls on the GPU, NVML no longer
 *                                         enumerates it (count one fewer, later GPUs one
 *                                         index lower, NOT_FOUND by bus id or UUID) and its
 *                                         handles return NVML_ERROR_GPU_IS_LOST; a GPU is
 *                                         lost or vanishes, not both
 *   fault_nvlink_down GPU AFTER_CALLS LINKS|-
 *                                         after that many calls on the GPU, its links
 *                                         LINKS (listed link indices, comma-separated;
 *                                         "-": every link) are inactive
 *   fault_delay CALL MS GPU|- TIMES|-     CALL takes MS milliseconds (at most an hour)
 *                                         before it answers, for one GPU or any, the first
 *                                         TIMES matches or always; signals do not cut it
 *                                         short, as they do not end a hung driver's call
 *   fault_driver_not_loaded INITS         the first INITS nvmlInit* calls fail
 *
 * Bounds: at most SIM_MAX_GPUS GPUs and, per GPU, MIG indices below SIM_MAX_MIG_DEVICES
 * (and max_mig_devices at most that) and link indices below NVML_NVLINK_MAX_LINKS.
 */

#include "nvmlsim.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAGIC "gfdsim-config 1"
#define MAX_LINE 65536 /* a cpulist of 4096 lone CPUs is about 20 KB */

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
    free(m->p2p_nvlink);
    free(m->switch_group);
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
int sim_parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *device,
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
        if (sim_parse_bus_id(value, &gpu->domain, &gpu->bus, &gpu->device, &gpu->function) != 0) {
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
        if (parse_numbers(ctx, key, value, &gpu->max_mig_devices, 1) != 0) {
            return -1;
        }
        if (gpu->max_mig_devices > SIM_MAX_MIG_DEVICES) {
            return parse_fail(ctx, "max_mig_devices: %u is more than the limit of %d",
                              gpu->max_mig_devices, SIM_MAX_MIG_DEVICES);
        }
        return 0;
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
        link->remote_gpu = -1;
        link->down_after = -1;
        if (strcmp(t_bus, "-") != 0) {
            unsigned d, b, dv, f;
            if (sim_parse_bus_id(t_bus, &d, &b, &dv, &f) != 0) {
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
        if (index >= SIM_MAX_MIG_DEVICES) {
            return parse_fail(ctx, "mig: MIG index %u is not below the limit of %d", index,
                              SIM_MAX_MIG_DEVICES);
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

/* fault_error CALL CODE GPU|- TIMES|- and fault_delay CALL MS GPU|- TIMES|- */
static int parse_fault_call(parse_ctx *ctx, sim_machine *m, const char *key, char *value) {
    int delay = strcmp(key, "fault_delay") == 0;
    char *rest = value;
    char *t_call = next_token(&rest);
    char *t_code = next_token(&rest);
    char *t_gpu = next_token(&rest);
    char *t_times = next_token(&rest);
    if (t_times == NULL || next_token(&rest) != NULL) {
        return parse_fail(ctx, "%s: expected CALL %s GPU|- TIMES|-", key, delay ? "MS" : "CODE");
    }
    sim_fault *faults = grow(m->faults, m->n_faults, sizeof *faults);
    if (faults == NULL) {
        return parse_fail(ctx, "out of memory");
    }
    m->faults = faults;
    sim_fault *f = &faults[m->n_faults++];
    if (copy_text(ctx, key, t_call, f->call, sizeof f->call) != 0) {
        return -1;
    }
    unsigned code, gpu;
    unsigned long long times;
    if (delay) {
        if (parse_u32(t_code, &f->delay_ms) != 0 || f->delay_ms == 0 ||
            f->delay_ms > SIM_MAX_DELAY_MS) {
            return parse_fail(ctx, "%s: '%s' is not a delay of 1 to %u ms", key, t_code,
                              SIM_MAX_DELAY_MS);
        }
        f->code = NVML_SUCCESS;
    } else {
        if (parse_u32(t_code, &code) != 0 || code == NVML_SUCCESS || code > INT_MAX) {
            return parse_fail(ctx, "%s: '%s' is not an NVML error code", key, t_code);
        }
        f->code = (int)code;
    }
    f->gpu = -1;
    if (strcmp(t_gpu, "-") != 0) {
        if (parse_u32(t_gpu, &gpu) != 0 || gpu > INT_MAX) {
            return parse_fail(ctx, "%s: GPU '%s' is not an index", key, t_gpu);
        }
        f->gpu = (int)gpu;
    }
    f->times = -1;
    if (strcmp(t_times, "-") != 0) {
        if (parse_ull(t_times, &times) != 0 || times > LLONG_MAX) {
            return parse_fail(ctx, "%s: TIMES '%s' is not a count", key, t_times);
        }
        f->times = (long long)times;
    }
    return 0;
}

static int take_link_down(parse_ctx *ctx, unsigned gpu, sim_link *link, unsigned after_calls) {
    if (link->down_after >= 0) {
        return parse_fail(ctx, "fault_nvlink_down: link %d of GPU %u is listed twice",
                          link->index, gpu);
    }
    link->down_after = after_calls;
    return 0;
}

static int parse_fault_nvlink_down(parse_ctx *ctx, sim_machine *m, char *value) {
    char *rest = value;
    char *t_gpu = next_token(&rest);
    char *t_after = next_token(&rest);
    char *t_links = next_token(&rest);
    if (t_links == NULL || next_token(&rest) != NULL) {
        return parse_fail(ctx, "fault_nvlink_down: expected GPU AFTER_CALLS LINKS|-");
    }
    unsigned index, after;
    if (parse_u32(t_gpu, &index) != 0 || index >= m->n_gpus) {
        return parse_fail(ctx, "fault_nvlink_down: GPU '%s' does not exist", t_gpu);
    }
    if (parse_u32(t_after, &after) != 0) {
        return parse_fail(ctx, "fault_nvlink_down: AFTER_CALLS '%s' is not a count", t_after);
    }
    sim_gpu *gpu = &m->gpus[index];
    if (gpu->n_links == 0) {
        return parse_fail(ctx, "fault_nvlink_down: GPU %u has no links", index);
    }
    if (strcmp(t_links, "-") == 0) {
        for (size_t i = 0; i < gpu->n_links; i++) {
            if (take_link_down(ctx, index, &gpu->links[i], after) != 0) {
                return -1;
            }
        }
        return 0;
    }
    char *cursor = t_links;
    while (cursor != NULL) {
        char *comma = strchr(cursor, ',');
        if (comma != NULL) {
            *comma = '\0';
        }
        unsigned link;
        if (parse_u32(cursor, &link) != 0) {
            return parse_fail(ctx, "fault_nvlink_down: '%s' is not a link index", cursor);
        }
        sim_link *found = NULL;
        for (size_t i = 0; i < gpu->n_links && found == NULL; i++) {
            if (gpu->links[i].index == (int)link) {
                found = &gpu->links[i];
            }
        }
        if (found == NULL) {
            return parse_fail(ctx, "fault_nvlink_down: GPU %u has no link %u", index, link);
        }
        if (take_link_down(ctx, index, found, after) != 0) {
            return -1;
        }
        cursor = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

/* Which GPU of the machine each link ends at (by bus id), for faults that cut links. */
static void find_link_peers(sim_machine *m) {
    for (size_t i = 0; i < m->n_gpus; i++) {
        for (size_t k = 0; k < m->gpus[i].n_links; k++) {
            sim_link *l = &m->gpus[i].links[k];
            unsigned d, b, dv, f;
            l->remote_gpu = -1;
            if (!l->has_remote_bus || sim_parse_bus_id(l->remote_bus, &d, &b, &dv, &f) != 0) {
                continue;
            }
            for (size_t j = 0; j < m->n_gpus; j++) {
                const sim_gpu *g = &m->gpus[j];
                if (j != i && g->domain == d && g->bus == b && g->device == dv &&
                    g->function == f) {
                    l->remote_gpu = (int)j;
                }
            }
        }
    }
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
        if (m->n_gpus >= SIM_MAX_GPUS) {
            /* Before anything per GPU pair is allocated (two n x n tables). */
            return parse_fail(ctx, "gpu: more than the limit of %d GPUs", SIM_MAX_GPUS);
        }
        sim_gpu *gpus = grow(m->gpus, m->n_gpus, sizeof *gpus);
        if (gpus == NULL) {
            return parse_fail(ctx, "out of memory");
        }
        m->gpus = gpus;
        gpus[m->n_gpus].lost_after = -1;
        gpus[m->n_gpus].vanish_after = -1;
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
    if (strcmp(key, "nvlink_p2p") == 0) {
        if (parse_numbers(ctx, key, value, n, 3) != 0) {
            return -1;
        }
        if (!(n[0] < n[1] && n[1] < m->n_gpus)) {
            return parse_fail(ctx, "nvlink_p2p: %u %u must be two GPU indices a < b below %zu",
                              n[0], n[1], m->n_gpus);
        }
        if (n[2] > NVML_P2P_STATUS_UNKNOWN) {
            return parse_fail(ctx, "nvlink_p2p: %u is not an nvmlGpuP2PStatus_t", n[2]);
        }
        if (m->p2p_nvlink[n[0] * m->n_gpus + n[1]] >= 0) {
            return parse_fail(ctx, "nvlink_p2p: pair %u %u is listed twice", n[0], n[1]);
        }
        m->p2p_nvlink[n[0] * m->n_gpus + n[1]] = (signed char)n[2];
        m->p2p_nvlink[n[1] * m->n_gpus + n[0]] = (signed char)n[2];
        return 0;
    }
    if (strcmp(key, "fault_error") == 0 || strcmp(key, "fault_delay") == 0) {
        if (parse_fault_call(ctx, m, key, value) != 0) {
            return -1;
        }
        int gpu = m->faults[m->n_faults - 1].gpu;
        if (gpu >= 0 && (size_t)gpu >= m->n_gpus) {
            return parse_fail(ctx, "%s: GPU %d does not exist", key, gpu);
        }
        return 0;
    }
    if (strcmp(key, "fault_gpu_lost") == 0 || strcmp(key, "fault_gpu_vanished") == 0) {
        if (parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        if (n[0] >= m->n_gpus) {
            return parse_fail(ctx, "%s: GPU %u does not exist", key, n[0]);
        }
        sim_gpu *gpu = &m->gpus[n[0]];
        if (gpu->lost_after >= 0 || gpu->vanish_after >= 0) {
            return parse_fail(ctx, "%s: GPU %u is lost or vanishes already", key, n[0]);
        }
        if (strcmp(key, "fault_gpu_lost") == 0) {
            gpu->lost_after = n[1];
        } else {
            gpu->vanish_after = n[1];
        }
        return 0;
    }
    if (strcmp(key, "fault_nvlink_down") == 0) {
        return parse_fault_nvlink_down(ctx, m, value);
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

/* ------------------------------------------------------------------------- */
/* NVSwitch fabrics */

typedef struct {
    const char *bus;
    int gpu;
} switch_end;

static int compare_switch_ends(const void *left, const void *right) {
    const switch_end *a = left, *b = right;
    int order = strcmp(a->bus, b->bus);
    return order != 0 ? order : (a->gpu > b->gpu) - (a->gpu < b->gpu);
}

static int find_group(int *parent, int node) {
    while (parent[node] != node) {
        parent[node] = parent[parent[node]];
        node = parent[node];
    }
    return node;
}

static void join_groups(int *parent, int a, int b) {
    int ra = find_group(parent, a), rb = find_group(parent, b);
    if (ra < rb) {
        parent[rb] = ra;
    } else if (rb < ra) {
        parent[ra] = rb;
    }
}

/* switch_group: GPUs that share a switch, joined further by NVLink P2P "ok" between GPUs
 * that both have switch links (the trunks of a two-board machine); -1 without switch links. */
static int group_switches(sim_machine *m) {
    size_t ends = 0;
    for (size_t i = 0; i < m->n_gpus; i++) {
        ends += m->gpus[i].n_links;
    }
    switch_end *end = malloc((ends > 0 ? ends : 1) * sizeof *end);
    if (end == NULL) {
        return -1;
    }
    size_t count = 0;
    for (size_t i = 0; i < m->n_gpus; i++) {
        const sim_gpu *gpu = &m->gpus[i];
        m->switch_group[i] = (int)i;
        for (size_t k = 0; k < gpu->n_links; k++) {
            const sim_link *l = &gpu->links[k];
            if (l->active && l->has_remote_bus && l->has_remote_type &&
                l->remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                end[count].bus = l->remote_bus;
                end[count].gpu = (int)i;
                count++;
            }
        }
    }
    qsort(end, count, sizeof *end, compare_switch_ends);
    for (size_t k = 1; k < count; k++) {
        if (strcmp(end[k].bus, end[k - 1].bus) == 0) {
            join_groups(m->switch_group, end[k - 1].gpu, end[k].gpu);
        }
    }
    unsigned char *attached = calloc(m->n_gpus > 0 ? m->n_gpus : 1, 1);
    if (attached == NULL) {
        free(end);
        return -1;
    }
    for (size_t k = 0; k < count; k++) {
        attached[end[k].gpu] = 1;
    }
    free(end);
    for (size_t a = 0; a < m->n_gpus; a++) {
        for (size_t b = a + 1; b < m->n_gpus && attached[a]; b++) {
            if (attached[b] && m->p2p_nvlink[a * m->n_gpus + b] == NVML_P2P_STATUS_OK) {
                join_groups(m->switch_group, (int)a, (int)b);
            }
        }
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        m->switch_group[i] = attached[i] ? find_group(m->switch_group, (int)i) : -1;
    }
    free(attached);
    return 0;
}

/* Read a whole config file into lines; return a machine or NULL with ctx->error set. */
sim_machine *sim_load_machine(const char *path, char *error, size_t error_size) {
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
        int late_record = strncmp(buffer, "pair ", 5) == 0 || strncmp(buffer, "fault_", 6) == 0 ||
                          strncmp(buffer, "nvlink_p2p ", 11) == 0;
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
        m->p2p_nvlink = malloc(cells > 0 ? cells : 1);
        m->switch_group = malloc((m->n_gpus > 0 ? m->n_gpus : 1) * sizeof *m->switch_group);
        if (m->levels == NULL || m->p2p_nvlink == NULL || m->switch_group == NULL) {
            ok = parse_fail(&ctx, "out of memory");
        } else {
            memset(m->p2p_nvlink, -1, cells);
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
    if (ok == 0) {
        find_link_peers(m);
    }
    if (ok == 0 && group_switches(m) != 0) {
        ctx.line = 0;
        ok = parse_fail(&ctx, "out of memory");
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

/* ------------------------------------------------------------------------- */
/* Configuration entry points (exported) */

GFDSIM_API int gfdsim_configure(const char *config_path) {
    LOCK();
    sim_machine *m = NULL;
    if (config_path != NULL) {
        char error[sizeof g_last_error];
        m = sim_load_machine(config_path, error, sizeof error);
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
