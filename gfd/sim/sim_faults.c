/*
 * sim_faults.c: the one fault engine. Owns the machine file's fault records
 * (docs/simulator.md, "The machine file"), which are the generic primitives every kind of
 * fault in gfd/sim/faults/ is lowered to, and what they do to a call once it is admitted:
 *   fault_error, fault_delay      a call (by name, for one GPU or any, the first TIMES
 *                                 matches or always) sleeps, then fails: sim_injected
 *   fault_gpu_lost, fault_gpu_vanished, fault_nvlink_down
 *                                 a GPU or some of its links change state after N calls on
 *                                 the GPU (sim_gpu.lost_after, vanish_after and
 *                                 sim_link.down_after, which call admission and
 *                                 sim_link_cut in sim_core.c read)
 *   fault_driver_not_loaded       the first N nvmlInit* calls fail (read by init)
 */

#include "nvmlsim.h"

#include <errno.h>
#include <string.h>
#include <time.h>

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

nvmlReturn_t sim_injected(const char *call, const int *gpus, int n_gpus) {
    for (size_t i = 0; i < g_machine->n_faults; i++) {
        sim_fault *f = &g_machine->faults[i];
        if (f->delay_ms > 0 && fault_matches(f, call, gpus, n_gpus)) {
            f->used++;
            sleep_ms(f->delay_ms);
        }
    }
    for (size_t i = 0; i < g_machine->n_faults; i++) {
        sim_fault *f = &g_machine->faults[i];
        if (f->delay_ms == 0 && fault_matches(f, call, gpus, n_gpus)) {
            f->used++;
            return (nvmlReturn_t)f->code;
        }
    }
    return NVML_SUCCESS;
}
