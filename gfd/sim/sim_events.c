/*
 * sim_events.c: NVML's event sets. Owns nvmlEventSetCreate, nvmlDeviceRegisterEvents,
 * nvmlDeviceGetSupportedEventTypes, nvmlEventSetWait_v2, nvmlEventSetWait and
 * nvmlEventSetFree. Posting events into the sets (those that fault_event records post when
 * a GPU's calls reach them) and freeing them all is sim_event_queue.c's.
 *
 * As in NVML, a set receives an event only if it recorded that type on that GPU when the
 * event happened (nvml.h: events before nvmlDeviceRegisterEvents are not recorded). A
 * wait blocks on a condition variable of the library's lock, so the lock is free while
 * it waits: another thread's calls go on, and the call that posts an event wakes it.
 * A wait returns, in this order: a queued event (oldest first); GPU_IS_LOST while a GPU
 * the set records is lost or has vanished; TIMEOUT when the time is up. A wait whose set
 * is freed meanwhile runs out its time (as on a real driver), one whose NVML is shut down
 * returns UNINITIALIZED.
 *
 * Sets are slots of a fixed table in the library's state (sim_state.event_sets:
 * SIM_MAX_EVENT_SETS, each queueing SIM_EVENT_QUEUE events; more are dropped, as from a
 * full driver queue), handed out as handles, so a stale or foreign handle is
 * INVALID_ARGUMENT rather than a crash. They outlive a machine no more than NVML's own: the
 * last nvmlShutdown and a new machine free them all.
 */

#include "nvmlsim.h"

#include <string.h>
#include <time.h>

/* nvml.h: gpuInstanceId and computeInstanceId of an event on the whole GPU. */
#define NO_INSTANCE 0xFFFFFFFFu

static int valid_set(sim_state *st, nvmlEventSet_t set) {
    for (size_t i = 0; i < SIM_MAX_EVENT_SETS; i++) {
        if (set == &st->event_sets[i]) {
            return set->in_use;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Sets and registration */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (set == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    for (size_t i = 0; i < SIM_MAX_EVENT_SETS; i++) {
        nvmlEventSet_t slot = &st->event_sets[i];
        if (!slot->in_use) {
            memset(slot->recorded, 0, sizeof slot->recorded);
            slot->head = slot->count = 0;
            slot->in_use = 1;
            *set = slot;
            return sim_state_unlock(st, NVML_SUCCESS);
        }
    }
    /* nvml.h names no error for this; a driver out of resources answers UNKNOWN. */
    return sim_state_unlock(st, NVML_ERROR_UNKNOWN);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (!valid_set(st, set)) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    sim_free_event_set(set);
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (eventTypes == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    /* No event_types value: a GPU without events, an empty mask (as on Windows). */
    sim_value(st->machine, gpu, SIM_VALUE_EVENT_TYPES, eventTypes);
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    /* MIG device handles: nvml.h has no per-instance event reporting through them. */
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (!valid_set(st, set)) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    /* As a real driver answered (H200, 580.159.04): no type at all succeeds and records
     * nothing, an unknown bit among the low 32 is ignored, one above them (1 << 40) is
     * NOT_SUPPORTED, as is a known type the GPU lacks (nvml.h: none is registered then). */
    unsigned long long known = eventTypes & (unsigned long long)nvmlEventTypeAll;
    unsigned long long supported;
    sim_value(st->machine, gpu, SIM_VALUE_EVENT_TYPES, &supported);
    if ((eventTypes >> 32) != 0 || (known & ~supported) != 0) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    set->recorded[gpu->handle.gpu] |= known;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Waiting */

static int records_gone_gpu(const sim_machine *m, nvmlEventSet_t set) {
    for (size_t i = 0; i < m->n_gpus; i++) {
        const sim_gpu *g = &m->gpus[i];
        if (set->recorded[i] != 0 && (g->lost || sim_vanished(g))) {
            return 1;
        }
    }
    return 0;
}

static struct timespec deadline_after(unsigned timeoutms) {
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += (time_t)(timeoutms / 1000u);
    at.tv_nsec += (long)(timeoutms % 1000u) * 1000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000L;
    }
    return at;
}

/* Under the lock, given up while waiting: the next event of a valid `set`, or why there is
 * none. */
static nvmlReturn_t next_event(sim_state *st, nvmlEventSet_t set, sim_queued_event *event,
                               unsigned timeoutms) {
    unsigned generation = set->generation;
    struct timespec deadline = deadline_after(timeoutms);
    int timed_out = 0;
    for (;;) {
        /* A set freed while it waits receives nothing more; the wait runs out its time, as
         * on a real driver. */
        int current = set->in_use && set->generation == generation;
        if (current && set->count > 0) {
            *event = set->queue[set->head];
            set->head = (set->head + 1) % SIM_EVENT_QUEUE;
            set->count--;
            return NVML_SUCCESS;
        }
        if (current && records_gone_gpu(st->machine, set)) {
            return NVML_ERROR_GPU_IS_LOST;
        }
        if (timed_out) {
            return NVML_ERROR_TIMEOUT;
        }
        timed_out = sim_state_wait(st, &deadline);
        if (st->init_count == 0 || st->machine == NULL) {
            return NVML_ERROR_UNINITIALIZED;
        }
    }
}

/* Both versions of the call: v2 fills the whole nvmlEventData_t, the older one only what
 * its smaller struct held (device, eventType, eventData). */
static nvmlReturn_t wait_for_event(sim_state *st, const char *call, nvmlEventSet_t set,
                                   nvmlEventData_t *data, unsigned timeoutms, int with_instances) {
    nvmlReturn_t rc = sim_enter_system(st, call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (data == NULL || !valid_set(st, set)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    sim_queued_event event;
    rc = next_event(st, set, &event, timeoutms);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    sim_gpu *gpu = &st->machine->gpus[event.gpu];
    data->device = &gpu->handle;
    data->eventType = event.type;
    data->eventData = event.data;
    if (with_instances) {
        const sim_mig *mig = event.mig >= 0 ? &gpu->migs[event.mig] : NULL;
        data->gpuInstanceId = mig != NULL ? mig->gi_id : NO_INSTANCE;
        data->computeInstanceId = mig != NULL ? mig->ci_id : NO_INSTANCE;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, wait_for_event(st, __func__, set, data, timeoutms, 1));
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, wait_for_event(st, __func__, set, data, timeoutms, 0));
}
