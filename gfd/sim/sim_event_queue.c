/*
 * sim_event_queue.c: what happens to the event sets of the library's state outside the
 * event calls themselves: events posted into the sets that record them (the fault_event
 * records, which call admission posts when a GPU's calls reach them) and every set freed
 * at once (the last nvmlShutdown, a new machine). Each wakes the event waits, which then
 * look again. The NVML calls on event sets are sim_events.c's.
 */

#include "nvmlsim.h"

void sim_free_event_set(nvmlEventSet_t set) {
    set->in_use = 0;
    set->generation++;
}

void sim_post_event(sim_state *st, const sim_gpu *gpu, int mig, unsigned long long type,
                    unsigned long long data, unsigned times) {
    int index = gpu->handle.gpu;
    for (size_t i = 0; i < SIM_MAX_EVENT_SETS; i++) {
        nvmlEventSet_t set = &st->event_sets[i];
        if (!set->in_use || (set->recorded[index] & type) == 0) {
            continue;
        }
        for (unsigned k = 0; k < times && set->count < SIM_EVENT_QUEUE; k++) {
            set->queue[(set->head + set->count++) % SIM_EVENT_QUEUE] =
                (sim_queued_event){index, mig, type, data};
        }
    }
    sim_state_wake(st);
}

void sim_release_event_sets(sim_state *st) {
    for (size_t i = 0; i < SIM_MAX_EVENT_SETS; i++) {
        if (st->event_sets[i].in_use) {
            sim_free_event_set(&st->event_sets[i]);
        }
    }
    sim_state_wake(st);
}
