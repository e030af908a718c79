/*
 * sim_state.c: the one home of the library's mutable state. Everything a call may change
 * (the machine served, whether one was configured, NVML's init count, the last
 * configuration error, the machine retired by the last configuration, the event sets)
 * lives in one sim_state (nvmlsim.h), defined here and nowhere else, with the lock that
 * guards it and the condition an event wait sleeps on.
 *
 * Every exported call takes the state once, with sim_state_lock, and hands it (or the
 * machine in it) to what it calls in other files; it gives it back with sim_state_unlock
 * as it returns. Nothing else reaches for the state: no other file names a variable of
 * another. This file calls no other file of the library.
 */

#include "nvmlsim.h"

#include <errno.h>
#include <time.h>

static sim_state state = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .changed_once = PTHREAD_ONCE_INIT,
};

/* Waits measure their timeout on the monotonic clock: a clock step must not end or
 * stretch one. */
static void init_changed(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&state.changed, &attr);
    pthread_condattr_destroy(&attr);
}

static pthread_cond_t *changed(sim_state *st) {
    pthread_once(&st->changed_once, init_changed);
    return &st->changed;
}

sim_state *sim_state_lock(void) {
    pthread_mutex_lock(&state.lock);
    return &state;
}

nvmlReturn_t sim_state_unlock(sim_state *st, nvmlReturn_t rc) {
    pthread_mutex_unlock(&st->lock);
    return rc;
}

int sim_state_wait(sim_state *st, const struct timespec *deadline) {
    return pthread_cond_timedwait(changed(st), &st->lock, deadline) == ETIMEDOUT;
}

void sim_state_wake(sim_state *st) {
    pthread_cond_broadcast(changed(st));
}

const char *sim_state_last_error(void) {
    return state.last_error;
}
