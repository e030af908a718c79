/*
 * sim_core.c: what every call goes through, and NVML's own lifecycle. Owns call admission
 * (init state, handle lookup, lost and vanished GPUs, then the fault engine's injected
 * errors and delays: the sim_enter_* helpers, each given the state its call took) and what
 * faults leave of the machine (NVML's enumeration, links cut); nvmlInit*, nvmlShutdown
 * and nvmlErrorString; and the system queries
 * nvmlSystemGetDriverVersion, nvmlSystemGetNVMLVersion and
 * nvmlSystemGetCudaDriverVersion*.
 */

#include "nvmlsim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_ENV "GFD_SIM_CONFIG"

/* ------------------------------------------------------------------------- */
/* Call admission: init state, handles, lost GPUs and injected errors */

static int find_gpu(sim_machine *m, nvmlDevice_t device, sim_gpu **gpu, sim_mig **mig) {
    if (m == NULL || device == NULL) {
        return 0;
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        sim_gpu *g = &m->gpus[i];
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

/* Count a call on each GPU it names; a GPU past its lost_after is gone for good, and so
 * is a vanished one (its handles were obtained before it vanished). */
nvmlReturn_t sim_admit(sim_state *st, const char *call, const int *gpus, int n_gpus) {
    sim_machine *m = st->machine;
    for (int k = 0; k < n_gpus; k++) {
        const sim_gpu *g = &m->gpus[gpus[k]];
        if (g->lost || sim_vanished(g)) {
            return NVML_ERROR_GPU_IS_LOST;
        }
    }
    nvmlReturn_t lost = NVML_SUCCESS;
    for (int k = 0; k < n_gpus; k++) {
        sim_gpu *g = &m->gpus[gpus[k]];
        g->calls++;
        /* The events of fault_event records that this call makes due, in file order. */
        for (const sim_change *c; (c = sim_take_due_event(m, g)) != NULL;) {
            sim_post_event(st, g, c->mig, c->event_type, c->amount, c->times);
        }
        if (g->lost_after >= 0 && g->calls > (unsigned long long)g->lost_after) {
            g->lost = 1;
            lost = NVML_ERROR_GPU_IS_LOST;
        }
        if (g->lost || sim_vanished(g)) {
            /* A wait on an event set that records this GPU now returns GPU_IS_LOST. */
            sim_state_wake(st);
        }
    }
    if (lost != NVML_SUCCESS) {
        return lost;
    }
    return sim_injected(m, call, gpus, n_gpus);
}

nvmlReturn_t sim_enter_system(sim_state *st, const char *call) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return sim_admit(st, call, NULL, 0);
}

/* Resolve a device handle (physical or MIG) and admit the call on its GPU. */
nvmlReturn_t sim_enter_device(sim_state *st, const char *call, nvmlDevice_t device, sim_gpu **gpu,
                              sim_mig **mig) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!find_gpu(st->machine, device, gpu, mig)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int index = (*gpu)->handle.gpu;
    return sim_admit(st, call, &index, 1);
}

/* Like sim_enter_device, but MIG handles are not accepted for this query. */
nvmlReturn_t sim_enter_physical(sim_state *st, const char *call, nvmlDevice_t device,
                                sim_gpu **gpu) {
    sim_mig *mig = NULL;
    nvmlReturn_t rc = sim_enter_device(st, call, device, gpu, &mig);
    if (rc == NVML_SUCCESS && mig != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

nvmlReturn_t sim_enter_pair(sim_state *st, const char *call, nvmlDevice_t a, nvmlDevice_t b,
                            sim_gpu **ga, sim_gpu **gb) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_mig *ma = NULL, *mb = NULL;
    if (!find_gpu(st->machine, a, ga, &ma) || !find_gpu(st->machine, b, gb, &mb)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int indices[2] = {(*ga)->handle.gpu, (*gb)->handle.gpu};
    nvmlReturn_t rc = sim_admit(st, call, indices, indices[0] == indices[1] ? 1 : 2);
    if (rc == NVML_SUCCESS && (ma != NULL || mb != NULL)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

nvmlReturn_t sim_copy_string(const char *value, char *dest, unsigned length) {
    size_t len = strlen(value);
    if (length < len + 1) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(dest, value, len + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* What faults leave of the machine */

int sim_vanished(const sim_gpu *gpu) {
    return gpu->vanish_after >= 0 && gpu->calls >= (unsigned long long)gpu->vanish_after;
}

unsigned sim_visible_count(const sim_machine *m) {
    unsigned count = 0;
    for (size_t i = 0; i < m->n_gpus; i++) {
        count += !sim_vanished(&m->gpus[i]);
    }
    return count;
}

sim_gpu *sim_visible_gpu(sim_machine *m, unsigned index) {
    for (size_t i = 0; i < m->n_gpus; i++) {
        sim_gpu *g = &m->gpus[i];
        if (!sim_vanished(g) && index-- == 0) {
            return g;
        }
    }
    return NULL;
}

unsigned sim_visible_index(const sim_machine *m, const sim_gpu *gpu) {
    unsigned index = 0;
    for (int i = 0; i < gpu->handle.gpu; i++) {
        index += !sim_vanished(&m->gpus[i]);
    }
    return index;
}

int sim_link_cut(const sim_machine *m, const sim_gpu *gpu, const sim_link *link) {
    /* The call asking was counted already: more than down_after calls means at least
     * down_after calls were answered before it. */
    if (link->down_after >= 0 && gpu->calls > (unsigned long long)link->down_after) {
        return 1;
    }
    return link->remote_gpu >= 0 && sim_vanished(&m->gpus[link->remote_gpu]);
}

int sim_link_active(const sim_machine *m, const sim_gpu *gpu, const sim_link *link) {
    return link->active && !sim_link_cut(m, gpu, link);
}

/* ------------------------------------------------------------------------- */
/* Init and shutdown */

static nvmlReturn_t init_common(sim_state *st, const char *call) {
    if (!st->configured && st->machine == NULL) {
        const char *path = getenv(CONFIG_ENV);
        if (path == NULL || *path == '\0') {
            return NVML_ERROR_DRIVER_NOT_LOADED;
        }
        char error[sizeof st->last_error];
        st->machine = sim_load_machine(path, error, sizeof error);
        if (st->machine == NULL) {
            memcpy(st->last_error, error, sizeof st->last_error);
            fprintf(stderr, "gfdsim: %s (from %s)\n", error, CONFIG_ENV);
            return NVML_ERROR_UNKNOWN;
        }
    }
    if (st->machine == NULL) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    st->machine->init_attempts++;
    if (st->machine->init_attempts <= st->machine->driver_not_loaded_inits) {
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    nvmlReturn_t rc = sim_injected(st->machine, call, NULL, 0);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    st->init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, init_common(st, __func__));
}

nvmlReturn_t nvmlInit_v2(void) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, init_common(st, __func__));
}

nvmlReturn_t nvmlInit(void) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, init_common(st, __func__));
}

nvmlReturn_t nvmlShutdown(void) {
    sim_state *st = sim_state_lock();
    if (st->init_count == 0) {
        return sim_state_unlock(st, NVML_ERROR_UNINITIALIZED);
    }
    nvmlReturn_t rc =
        st->machine != NULL ? sim_injected(st->machine, __func__, NULL, 0) : NVML_SUCCESS;
    st->init_count--;
    if (st->init_count == 0) {
        /* NVML's state goes with its last reference, event sets included. */
        sim_release_event_sets(st);
    }
    return sim_state_unlock(st, rc);
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
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (version == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!st->machine->has_driver) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    return sim_state_unlock(st, sim_copy_string(st->machine->driver, version, length));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (version == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!st->machine->has_driver) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    /* NVML reports its own version as the API major followed by the driver version. */
    char text[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 8];
    snprintf(text, sizeof text, "%s.%s", NVML_API_VERSION_STR, st->machine->driver);
    return sim_state_unlock(st, sim_copy_string(text, version, length));
}

static nvmlReturn_t cuda_version(sim_state *st, const char *call, int *cudaDriverVersion) {
    nvmlReturn_t rc = sim_enter_system(st, call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (cudaDriverVersion == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!st->machine->has_cuda) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    *cudaDriverVersion = st->machine->cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, cuda_version(st, __func__, cudaDriverVersion));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, cuda_version(st, __func__, cudaDriverVersion));
}
