/*
 * sim_faults.c: the one fault engine. Owns the machine file's fault records
 * (docs/simulator.md, "The machine file"), which are the generic primitives every kind of
 * fault in gfd/sim/faults/ is lowered to, and what they do once a call is admitted:
 *   fault_error, fault_delay      a call (by name, for one GPU or any, the first TIMES
 *                                 matches or always) sleeps, then fails: sim_injected
 *   fault_gpu_lost, fault_gpu_vanished, fault_nvlink_down
 *                                 a GPU or some of its links change state after N calls on
 *                                 the GPU (sim_gpu.lost_after, vanish_after and
 *                                 sim_link.down_after, which call admission and
 *                                 sim_link_cut in sim_core.c read)
 *   fault_driver_not_loaded       the first N nvmlInit* calls fail (read by init)
 *   fault_set, fault_rise         after N calls on a GPU, one of its values (the table
 *                                 below) is set, or rises with every further call on it:
 *                                 sim_value
 *   fault_event                   after N calls on a GPU, events happen on it:
 *                                 sim_take_due_event, which call admission (sim_core.c)
 *                                 posts (sim_event_queue.c)
 * It also owns the per-GPU values' names and bounds, which the "value" records of a GPU
 * (sim_config_gpu.c) use too.
 */

#include "nvmlsim.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Per-GPU values */

/* A byte is a small enum (the fabric's state); a level (a PCIe link's generation or
 * width) is set by faults, never risen; a percent runs 0 to 100. */
typedef enum {
    VALUE_FLAG,
    VALUE_BYTE,
    VALUE_COUNT32,
    VALUE_COUNT64,
    VALUE_EVENT_MASK,
    VALUE_LEVEL,
    VALUE_PERCENT
} value_kind;

static const struct {
    const char *name;
    value_kind kind;
} value_table[SIM_VALUE_COUNT] = {
    [SIM_VALUE_ECC_CURRENT] = {"ecc_current", VALUE_FLAG},
    [SIM_VALUE_ECC_PENDING] = {"ecc_pending", VALUE_FLAG},
    [SIM_VALUE_ECC_VOLATILE_CORRECTED] = {"ecc_volatile_corrected", VALUE_COUNT64},
    [SIM_VALUE_ECC_VOLATILE_UNCORRECTED] = {"ecc_volatile_uncorrected", VALUE_COUNT64},
    [SIM_VALUE_ECC_AGGREGATE_CORRECTED] = {"ecc_aggregate_corrected", VALUE_COUNT64},
    [SIM_VALUE_ECC_AGGREGATE_UNCORRECTED] = {"ecc_aggregate_uncorrected", VALUE_COUNT64},
    [SIM_VALUE_REMAPPED_CORRECTABLE] = {"remapped_rows_correctable", VALUE_COUNT32},
    [SIM_VALUE_REMAPPED_UNCORRECTABLE] = {"remapped_rows_uncorrectable", VALUE_COUNT32},
    [SIM_VALUE_REMAPPED_PENDING] = {"remapped_rows_pending", VALUE_FLAG},
    [SIM_VALUE_REMAPPED_FAILURE] = {"remapped_rows_failure", VALUE_FLAG},
    [SIM_VALUE_RETIRED_SINGLE_BIT] = {"retired_pages_single_bit", VALUE_COUNT32},
    [SIM_VALUE_RETIRED_DOUBLE_BIT] = {"retired_pages_double_bit", VALUE_COUNT32},
    [SIM_VALUE_RETIRED_PENDING] = {"retired_pages_pending", VALUE_FLAG},
    [SIM_VALUE_EVENT_TYPES] = {"event_types", VALUE_EVENT_MASK},
    [SIM_VALUE_PCIE_CURRENT_GENERATION] = {"pcie_current_generation", VALUE_LEVEL},
    [SIM_VALUE_PCIE_CURRENT_WIDTH] = {"pcie_current_width", VALUE_LEVEL},
    [SIM_VALUE_PCIE_MAX_GENERATION] = {"pcie_max_generation", VALUE_LEVEL},
    [SIM_VALUE_PCIE_MAX_WIDTH] = {"pcie_max_width", VALUE_LEVEL},
    [SIM_VALUE_PCIE_GPU_MAX_GENERATION] = {"pcie_gpu_max_generation", VALUE_LEVEL},
    [SIM_VALUE_PCIE_REPLAY_COUNTER] = {"pcie_replay_counter", VALUE_COUNT32},
    [SIM_VALUE_GPU_UTILIZATION] = {"gpu_utilization", VALUE_PERCENT},
    [SIM_VALUE_FABRIC_STATE] = {"fabric_state", VALUE_BYTE},
    [SIM_VALUE_FABRIC_STATUS] = {"fabric_status", VALUE_COUNT32},
    [SIM_VALUE_FABRIC_HEALTH] = {"fabric_health_mask", VALUE_COUNT32},
};

static unsigned long long value_max(sim_value_id id) {
    switch (value_table[id].kind) {
    case VALUE_FLAG: return 1;
    case VALUE_BYTE: return UCHAR_MAX;
    case VALUE_PERCENT: return 100;
    case VALUE_LEVEL:
    case VALUE_COUNT32: return UINT_MAX;
    case VALUE_EVENT_MASK: return (unsigned long long)nvmlEventTypeAll;
    case VALUE_COUNT64: break;
    }
    return ULLONG_MAX;
}

int sim_value_named(const char *name) {
    for (int id = 0; id < SIM_VALUE_COUNT; id++) {
        if (strcmp(value_table[id].name, name) == 0) {
            return id;
        }
    }
    return -1;
}

int sim_value_fits(sim_value_id id, unsigned long long v) {
    if (value_table[id].kind == VALUE_EVENT_MASK) {
        return (v & ~(unsigned long long)nvmlEventTypeAll) == 0;
    }
    return v <= value_max(id);
}

/* ------------------------------------------------------------------------- */
/* Fault records */

/* fault_error CALL CODE GPU|- TIMES|- and fault_delay CALL MS GPU|- TIMES|- */
static int parse_fault_call(sim_parse_ctx *ctx, sim_machine *m, const char *key, char *value) {
    int delay = strcmp(key, "fault_delay") == 0;
    char *rest = value;
    char *t_call = sim_next_token(&rest);
    char *t_code = sim_next_token(&rest);
    char *t_gpu = sim_next_token(&rest);
    char *t_times = sim_next_token(&rest);
    if (t_times == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "%s: expected CALL %s GPU|- TIMES|-", key,
                              delay ? "MS" : "CODE");
    }
    sim_fault *faults = sim_grow(m->faults, m->n_faults, sizeof *faults);
    if (faults == NULL) {
        return sim_parse_fail(ctx, "out of memory");
    }
    m->faults = faults;
    sim_fault *f = &faults[m->n_faults++];
    if (sim_copy_text(ctx, key, t_call, f->call, sizeof f->call) != 0) {
        return -1;
    }
    unsigned code, gpu;
    unsigned long long times;
    if (delay) {
        if (sim_parse_u32(t_code, &f->delay_ms) != 0 || f->delay_ms == 0 ||
            f->delay_ms > SIM_MAX_DELAY_MS) {
            return sim_parse_fail(ctx, "%s: '%s' is not a delay of 1 to %u ms", key, t_code,
                                  SIM_MAX_DELAY_MS);
        }
        f->code = NVML_SUCCESS;
    } else {
        if (sim_parse_u32(t_code, &code) != 0 || code == NVML_SUCCESS || code > INT_MAX) {
            return sim_parse_fail(ctx, "%s: '%s' is not an NVML error code", key, t_code);
        }
        f->code = (int)code;
    }
    f->gpu = -1;
    if (strcmp(t_gpu, "-") != 0) {
        if (sim_parse_u32(t_gpu, &gpu) != 0 || gpu > INT_MAX) {
            return sim_parse_fail(ctx, "%s: GPU '%s' is not an index", key, t_gpu);
        }
        f->gpu = (int)gpu;
    }
    f->times = -1;
    if (strcmp(t_times, "-") != 0) {
        if (sim_parse_ull(t_times, &times) != 0 || times > LLONG_MAX) {
            return sim_parse_fail(ctx, "%s: TIMES '%s' is not a count", key, t_times);
        }
        f->times = (long long)times;
    }
    return 0;
}

static int take_link_down(sim_parse_ctx *ctx, unsigned gpu, sim_link *link, unsigned after_calls) {
    if (link->down_after >= 0) {
        return sim_parse_fail(ctx, "fault_nvlink_down: link %d of GPU %u is listed twice",
                              link->index, gpu);
    }
    link->down_after = after_calls;
    return 0;
}

static int parse_fault_nvlink_down(sim_parse_ctx *ctx, sim_machine *m, char *value) {
    char *rest = value;
    char *t_gpu = sim_next_token(&rest);
    char *t_after = sim_next_token(&rest);
    char *t_links = sim_next_token(&rest);
    if (t_links == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "fault_nvlink_down: expected GPU AFTER_CALLS LINKS|-");
    }
    unsigned index, after;
    if (sim_parse_u32(t_gpu, &index) != 0 || index >= m->n_gpus) {
        return sim_parse_fail(ctx, "fault_nvlink_down: GPU '%s' does not exist", t_gpu);
    }
    if (sim_parse_u32(t_after, &after) != 0) {
        return sim_parse_fail(ctx, "fault_nvlink_down: AFTER_CALLS '%s' is not a count", t_after);
    }
    sim_gpu *gpu = &m->gpus[index];
    if (gpu->n_links == 0) {
        return sim_parse_fail(ctx, "fault_nvlink_down: GPU %u has no links", index);
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
        if (sim_parse_u32(cursor, &link) != 0) {
            return sim_parse_fail(ctx, "fault_nvlink_down: '%s' is not a link index", cursor);
        }
        sim_link *found = NULL;
        for (size_t i = 0; i < gpu->n_links && found == NULL; i++) {
            if (gpu->links[i].index == (int)link) {
                found = &gpu->links[i];
            }
        }
        if (found == NULL) {
            return sim_parse_fail(ctx, "fault_nvlink_down: GPU %u has no link %u", index, link);
        }
        if (take_link_down(ctx, index, found, after) != 0) {
            return -1;
        }
        cursor = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

/* The GPU and AFTER_CALLS that start fault_set, fault_rise and fault_event. */
static sim_change *new_change(sim_parse_ctx *ctx, sim_machine *m, const char *key,
                              const char *t_gpu, const char *t_after, sim_change_kind kind) {
    unsigned gpu, after;
    if (sim_parse_u32(t_gpu, &gpu) != 0 || gpu >= m->n_gpus) {
        sim_parse_fail(ctx, "%s: GPU '%s' does not exist", key, t_gpu);
        return NULL;
    }
    if (sim_parse_u32(t_after, &after) != 0) {
        sim_parse_fail(ctx, "%s: AFTER_CALLS '%s' is not a count", key, t_after);
        return NULL;
    }
    sim_change *changes = sim_grow(m->changes, m->n_changes, sizeof *changes);
    if (changes == NULL) {
        sim_parse_fail(ctx, "out of memory");
        return NULL;
    }
    m->changes = changes;
    sim_change *c = &changes[m->n_changes++];
    c->kind = kind;
    c->gpu = (int)gpu;
    c->after = after;
    c->mig = -1;
    return c;
}

/* fault_set GPU AFTER_CALLS NAME VALUE|- and fault_rise GPU AFTER_CALLS NAME PER_CALL */
static int parse_value_change(sim_parse_ctx *ctx, sim_machine *m, const char *key,
                              char *value) {
    int rise = strcmp(key, "fault_rise") == 0;
    char *rest = value;
    char *t_gpu = sim_next_token(&rest);
    char *t_after = sim_next_token(&rest);
    char *t_name = sim_next_token(&rest);
    char *t_value = sim_next_token(&rest);
    if (t_value == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "%s: expected GPU AFTER_CALLS NAME %s", key,
                              rise ? "PER_CALL" : "VALUE|-");
    }
    sim_change_kind kind = rise ? SIM_CHANGE_RISE : SIM_CHANGE_SET;
    sim_change *c = new_change(ctx, m, key, t_gpu, t_after, kind);
    if (c == NULL) {
        return -1;
    }
    int id = sim_value_named(t_name);
    if (id < 0) {
        return sim_parse_fail(ctx, "%s: '%s' is not a GPU value", key, t_name);
    }
    c->value = (sim_value_id)id;
    if (rise) {
        if (value_table[id].kind != VALUE_COUNT32 && value_table[id].kind != VALUE_COUNT64) {
            return sim_parse_fail(ctx, "%s: %s is not a count, it cannot rise", key, t_name);
        }
        if (sim_parse_ull(t_value, &c->amount) != 0 || c->amount == 0) {
            return sim_parse_fail(ctx, "%s: PER_CALL '%s' is not a count above 0", key, t_value);
        }
        return 0;
    }
    c->supported = strcmp(t_value, "-") != 0;
    if (c->supported && (sim_parse_ull(t_value, &c->amount) != 0 ||
                         !sim_value_fits(c->value, c->amount))) {
        return sim_parse_fail(ctx, "%s: '%s' is not a value of %s", key, t_value, t_name);
    }
    return 0;
}

/* fault_event GPU AFTER_CALLS TYPE DATA TIMES MIG|- */
static int parse_event(sim_parse_ctx *ctx, sim_machine *m, const char *key, char *value) {
    char *rest = value;
    char *t_gpu = sim_next_token(&rest);
    char *t_after = sim_next_token(&rest);
    char *t_type = sim_next_token(&rest);
    char *t_data = sim_next_token(&rest);
    char *t_times = sim_next_token(&rest);
    char *t_mig = sim_next_token(&rest);
    if (t_mig == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "%s: expected GPU AFTER_CALLS TYPE DATA TIMES MIG|-", key);
    }
    sim_change *c = new_change(ctx, m, key, t_gpu, t_after, SIM_CHANGE_EVENT);
    if (c == NULL) {
        return -1;
    }
    unsigned long long type;
    if (sim_parse_ull(t_type, &type) != 0 || type == 0 || (type & (type - 1)) != 0 ||
        !sim_value_fits(SIM_VALUE_EVENT_TYPES, type)) {
        return sim_parse_fail(ctx, "%s: '%s' is not one nvmlEventType bit", key, t_type);
    }
    c->event_type = type;
    if (sim_parse_ull(t_data, &c->amount) != 0) {
        return sim_parse_fail(ctx, "%s: DATA '%s' is not a number", key, t_data);
    }
    if (sim_parse_u32(t_times, &c->times) != 0 || c->times == 0 || c->times > SIM_MAX_EVENTS) {
        return sim_parse_fail(ctx, "%s: TIMES '%s' is not 1 to %d", key, t_times, SIM_MAX_EVENTS);
    }
    if (strcmp(t_mig, "-") != 0) {
        const sim_gpu *gpu = &m->gpus[c->gpu];
        unsigned index;
        if (sim_parse_u32(t_mig, &index) != 0) {
            return sim_parse_fail(ctx, "%s: MIG '%s' is not an index", key, t_mig);
        }
        for (size_t j = 0; j < gpu->n_migs && c->mig < 0; j++) {
            if (gpu->migs[j].index == index) {
                c->mig = (int)j;
            }
        }
        if (c->mig < 0) {
            return sim_parse_fail(ctx, "%s: GPU %d has no MIG device %u", key, c->gpu, index);
        }
    }
    return 0;
}

int sim_parse_fault_record(sim_parse_ctx *ctx, sim_machine *m, const char *key, char *value) {
    unsigned n[2];
    if (strcmp(key, "fault_error") == 0 || strcmp(key, "fault_delay") == 0) {
        if (parse_fault_call(ctx, m, key, value) != 0) {
            return -1;
        }
        int gpu = m->faults[m->n_faults - 1].gpu;
        if (gpu >= 0 && (size_t)gpu >= m->n_gpus) {
            return sim_parse_fail(ctx, "%s: GPU %d does not exist", key, gpu);
        }
        return 0;
    }
    if (strcmp(key, "fault_gpu_lost") == 0 || strcmp(key, "fault_gpu_vanished") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        if (n[0] >= m->n_gpus) {
            return sim_parse_fail(ctx, "%s: GPU %u does not exist", key, n[0]);
        }
        sim_gpu *gpu = &m->gpus[n[0]];
        if (gpu->lost_after >= 0 || gpu->vanish_after >= 0) {
            return sim_parse_fail(ctx, "%s: GPU %u is lost or vanishes already", key, n[0]);
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
    if (strcmp(key, "fault_set") == 0 || strcmp(key, "fault_rise") == 0) {
        return parse_value_change(ctx, m, key, value);
    }
    if (strcmp(key, "fault_event") == 0) {
        return parse_event(ctx, m, key, value);
    }
    if (strcmp(key, "fault_driver_not_loaded") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        m->driver_not_loaded_inits = n[0];
        return 0;
    }
    return sim_parse_fail(ctx, "unknown key '%s'", key);
}

/* ------------------------------------------------------------------------- */
/* What faults do to an admitted call */

static int fault_matches(const sim_fault *f, const char *call, const int *gpus, int n_gpus) {
    if (strcmp(f->call, call) != 0 || (f->times >= 0 && f->used >= f->times)) {
        return 0;
    }
    int matches = f->gpu < 0;
    for (int k = 0; k < n_gpus && !matches; k++) {
        matches = f->gpu == gpus[k];
    }
    return matches;
}

/* Sleep the whole time: a signal does not end a hung driver's call either, so the
 * process must cope with a call it cannot interrupt. The lock stays held, as NVML's
 * own would. */
static void sleep_ms(unsigned ms) {
    struct timespec left = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

nvmlReturn_t sim_injected(sim_machine *m, const char *call, const int *gpus, int n_gpus) {
    for (size_t i = 0; i < m->n_faults; i++) {
        sim_fault *f = &m->faults[i];
        if (f->delay_ms > 0 && fault_matches(f, call, gpus, n_gpus)) {
            f->used++;
            sleep_ms(f->delay_ms);
        }
    }
    for (size_t i = 0; i < m->n_faults; i++) {
        sim_fault *f = &m->faults[i];
        if (f->delay_ms == 0 && fault_matches(f, call, gpus, n_gpus)) {
            f->used++;
            return (nvmlReturn_t)f->code;
        }
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* What faults do to a GPU's values and events */

int sim_value(const sim_machine *m, const sim_gpu *gpu, sim_value_id id, unsigned long long *out) {
    int supported = gpu->has_value[id];
    unsigned long long v = gpu->values[id];
    unsigned long long max = value_max(id);
    for (size_t i = 0; i < m->n_changes; i++) {
        const sim_change *c = &m->changes[i];
        if (c->kind == SIM_CHANGE_EVENT || c->gpu != gpu->handle.gpu || c->value != id ||
            gpu->calls <= c->after) {
            continue;
        }
        if (c->kind == SIM_CHANGE_SET) {
            supported = c->supported;
            v = c->amount;
        } else if (supported) {
            /* Every call past AFTER_CALLS adds PER_CALL; a count stops at its maximum. */
            unsigned long long calls = gpu->calls - c->after;
            unsigned long long room = max - v;
            v = calls > room / c->amount ? max : v + calls * c->amount;
        }
    }
    *out = supported ? v : 0;
    return supported;
}

sim_change *sim_take_due_event(sim_machine *m, const sim_gpu *gpu) {
    for (size_t i = 0; i < m->n_changes; i++) {
        sim_change *c = &m->changes[i];
        if (c->kind == SIM_CHANGE_EVENT && !c->posted && c->gpu == gpu->handle.gpu &&
            gpu->calls > c->after) {
            c->posted = 1;
            return c;
        }
    }
    return NULL;
}
