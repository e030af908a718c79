/*
 * sim_core.c: what every call goes through, and NVML's own lifecycle. Owns the shared
 * state (the machine, the init count, the lock), call admission (init state, handle
 * lookup, lost and vanished GPUs, then the fault engine's injected errors and delays: the
 * sim_enter_* helpers) and what faults leave of the machine (NVML's enumeration, links
 * cut); nvmlInit*, nvmlShutdown and nvmlErrorString; and the system queries
 * nvmlSystemGetDriverVersion, nvmlSystemGetNVMLVersion and
 * nvmlSystemGetCudaDriverVersion*.
 */

#include "nvmlsim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_ENV "GFD_SIM_CONFIG"

/* ------------------------------------------------------------------------- */
/* Shared state */

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
sim_machine *g_machine;
int g_configured; /* gfdsim_configure was called with a path */
unsigned g_init_count;
char g_last_error[1024];

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

/* Count a call on each GPU it names; a GPU past its lost_after is gone for good, and so
 * is a vanished one (its handles were obtained before it vanished). */
nvmlReturn_t sim_admit(const char *call, const int *gpus, int n_gpus) {
    for (int k = 0; k < n_gpus; k++) {
        const sim_gpu *g = &g_machine->gpus[gpus[k]];
        if (g->lost || sim_vanished(g)) {
            return NVML_ERROR_GPU_IS_LOST;
        }
    }
    nvmlReturn_t lost = NVML_SUCCESS;
    for (int k = 0; k < n_gpus; k++) {
        sim_gpu *g = &g_machine->gpus[gpus[k]];
        g->calls++;
        sim_post_due_events(g);
        if (g->lost_after >= 0 && g->calls > (unsigned long long)g->lost_after) {
            g->lost = 1;
            lost = NVML_ERROR_GPU_IS_LOST;
        }
        if (g->lost || sim_vanished(g)) {
            /* A wait on an event set that records this GPU now returns GPU_IS_LOST. */
            sim_wake_event_waiters();
        }
    }
    if (lost != NVML_SUCCESS) {
        return lost;
    }
    return sim_injected(call, gpus, n_gpus);
}

nvmlReturn_t sim_enter_system(const char *call) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    return sim_admit(call, NULL, 0);
}

/* Resolve a device handle (physical or MIG) and admit the call on its GPU. */
nvmlReturn_t sim_enter_device(const char *call, nvmlDevice_t device, sim_gpu **gpu,
                              sim_mig **mig) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (!find_gpu(device, gpu, mig)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int index = (*gpu)->handle.gpu;
    return sim_admit(call, &index, 1);
}

/* Like sim_enter_device, but MIG handles are not accepted for this query. */
nvmlReturn_t sim_enter_physical(const char *call, nvmlDevice_t device, sim_gpu **gpu) {
    sim_mig *mig = NULL;
    nvmlReturn_t rc = sim_enter_device(call, device, gpu, &mig);
    if (rc == NVML_SUCCESS && mig != NULL) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return rc;
}

nvmlReturn_t sim_enter_pair(const char *call, nvmlDevice_t a, nvmlDevice_t b, sim_gpu **ga,
                            sim_gpu **gb) {
    if (g_init_count == 0 || g_machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_mig *ma = NULL, *mb = NULL;
    if (!find_gpu(a, ga, &ma) || !find_gpu(b, gb, &mb)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int indices[2] = {(*ga)->handle.gpu, (*gb)->handle.gpu};
    nvmlReturn_t rc = sim_admit(call, indices, indices[0] == indices[1] ? 1 : 2);
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

unsigned sim_visible_count(void) {
    unsigned count = 0;
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        count += !sim_vanished(&g_machine->gpus[i]);
    }
    return count;
}

sim_gpu *sim_visible_gpu(unsigned index) {
    for (size_t i = 0; i < g_machine->n_gpus; i++) {
        sim_gpu *g = &g_machine->gpus[i];
        if (!sim_vanished(g) && index-- == 0) {
            return g;
        }
    }
    return NULL;
}

unsigned sim_visible_index(const sim_gpu *gpu) {
    unsigned index = 0;
    for (int i = 0; i < gpu->handle.gpu; i++) {
        index += !sim_vanished(&g_machine->gpus[i]);
    }
    return index;
}

int sim_link_cut(const sim_gpu *gpu, const sim_link *link) {
    /* The call asking was counted already: more than down_after calls means at least
     * down_after calls were answered before it. */
    if (link->down_after >= 0 && gpu->calls > (unsigned long long)link->down_after) {
        return 1;
    }
    return link->remote_gpu >= 0 && sim_vanished(&g_machine->gpus[link->remote_gpu]);
}

int sim_link_active(const sim_gpu *gpu, const sim_link *link) {
    return link->active && !sim_link_cut(gpu, link);
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
        g_machine = sim_load_machine(path, error, sizeof error);
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
    nvmlReturn_t rc = sim_injected(call, NULL, 0);
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
    nvmlReturn_t rc = g_machine != NULL ? sim_injected(__func__, NULL, 0) : NVML_SUCCESS;
    g_init_count--;
    if (g_init_count == 0) {
        /* NVML's state goes with its last reference, event sets included. */
        sim_release_event_sets();
    }
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
    nvmlReturn_t rc = sim_enter_system(__func__);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (version == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!g_machine->has_driver) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    RETURN(sim_copy_string(g_machine->driver, version, length));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    LOCK();
    nvmlReturn_t rc = sim_enter_system(__func__);
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
    RETURN(sim_copy_string(text, version, length));
}

static nvmlReturn_t cuda_version(const char *call, int *cudaDriverVersion) {
    nvmlReturn_t rc = sim_enter_system(call);
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
