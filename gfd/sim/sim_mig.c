/*
 * sim_mig.c: Multi-Instance GPU. Owns nvmlDeviceGetMigMode,
 * nvmlDeviceGetMaxMigDeviceCount, the MIG device handles
 * (nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceIsMigDeviceHandle,
 * nvmlDeviceGetDeviceHandleFromMigDeviceHandle), the per-MIG-device
 * nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId and
 * nvmlDeviceGetAttributes_v2, and GPU and compute instances with their profiles
 * (nvmlDeviceGetGpuInstance*, nvmlGpuInstance*, nvmlComputeInstance*).
 */

#include "nvmlsim.h"

#include <stdio.h>
#include <string.h>

#define DEFAULT_MAX_MIG_DEVICES 7

/* ------------------------------------------------------------------------- */
/* MIG mode and MIG device handles */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (currentMode == NULL || pendingMode == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *currentMode = gpu->mig_current ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = gpu->mig_pending ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return sim_state_unlock(st, NVML_SUCCESS);
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
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT; /* a MIG handle has no MIG children */
    }
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (count == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    *count = max_mig_devices(gpu);
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (migDevice == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    if (!gpu->mig_current) {
        return sim_state_unlock(st, NVML_ERROR_NOT_FOUND);
    }
    if (index >= max_mig_devices(gpu)) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].index == index) {
            *migDevice = &gpu->migs[j].handle;
            return sim_state_unlock(st, NVML_SUCCESS);
        }
    }
    return sim_state_unlock(st, NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (isMigDevice == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    *isMigDevice = mig != NULL;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, migDevice, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (device == NULL || mig == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    *device = &gpu->handle;
    return sim_state_unlock(st, NVML_SUCCESS);
}

static nvmlReturn_t enter_mig(sim_state *st, const char *call, nvmlDevice_t device, const void *out,
                              sim_gpu **gpu, sim_mig **mig) {
    nvmlReturn_t rc = sim_enter_device(st, call, device, gpu, mig);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return *mig != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(st, __func__, device, id, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    *id = mig->gi_id;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(st, __func__, device, id, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    *id = mig->ci_id;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = enter_mig(st, __func__, device, attributes, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
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
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* GPU instances and their profiles */

static int find_gpu_instance(sim_machine *m, nvmlGpuInstance_t gi, sim_gpu **gpu, sim_mig **mig) {
    if (m == NULL || gi == NULL) {
        return 0;
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        for (size_t j = 0; j < m->gpus[i].n_migs; j++) {
            if (gi == &m->gpus[i].migs[j].gi_handle) {
                *gpu = &m->gpus[i];
                *mig = &m->gpus[i].migs[j];
                return 1;
            }
        }
    }
    return 0;
}

static nvmlReturn_t enter_instance(sim_state *st, const char *call, sim_gpu *gpu) {
    int index = gpu->handle.gpu;
    return sim_admit(st, call, &index, 1);
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

static nvmlReturn_t enter_gi_profile(sim_state *st, const char *call, nvmlDevice_t device,
                                     unsigned profile, const void *info, sim_gpu **gpu,
                                     const sim_mig **mig) {
    nvmlReturn_t rc = sim_enter_physical(st, call, device, gpu);
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
/* The variant suffix NVIDIA's tools print after a profile, by NVML_GPU_INSTANCE_PROFILE_*
 * index: +me (REV1), +gfx, -me (NO_ME), +me.all (ALL_ME). */
static const char *gi_profile_variant(const sim_mig *mig) {
    switch (mig->gi_profile_index) {
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1:
        return "+me";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX:
    case NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX:
        return "+gfx";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
        return "-me";
    case NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME:
    case NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
        return "+me.all";
    default:
        return mig->media_extensions ? "+me" : "";
    }
}

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
                 gi_profile_variant(mig));
    }
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_gi_profile(st, __func__, device, profile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
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
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_gi_profile(st, __func__, device, profile, info, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
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
        return sim_state_unlock(st, NVML_SUCCESS);
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
        return sim_state_unlock(st, NVML_SUCCESS);
    }
    return sim_state_unlock(st, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc == NVML_ERROR_NOT_SUPPORTED) {
        rc = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (gpuInstance == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_mig_mode || !gpu->mig_current) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    sim_mig *owner = gpu_instance_owner(gpu, id);
    if (owner == NULL) {
        return sim_state_unlock(st, NVML_ERROR_NOT_FOUND);
    }
    *gpuInstance = &owner->gi_handle;
    return sim_state_unlock(st, NVML_SUCCESS);
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
    sim_state *st = sim_state_lock();
    if (st->init_count == 0 || st->machine == NULL) {
        return sim_state_unlock(st, NVML_ERROR_UNINITIALIZED);
    }
    sim_gpu *gpu;
    sim_mig *mig;
    if (!find_gpu_instance(st->machine, gpuInstance, &gpu, &mig) || info == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t rc = enter_instance(st, __func__, gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    memset(info, 0, sizeof *info);
    info->device = &gpu->handle;
    info->id = mig->gi_id;
    info->profileId = mig->gi_profile_id;
    info->placement.start = gi_placement_start(gpu, mig);
    info->placement.size = mig->gi_slices;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
    sim_state *st = sim_state_lock();
    if (st->init_count == 0 || st->machine == NULL) {
        return sim_state_unlock(st, NVML_ERROR_UNINITIALIZED);
    }
    sim_gpu *gpu;
    sim_mig *owner;
    if (!find_gpu_instance(st->machine, gpuInstance, &gpu, &owner) || computeInstance == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlReturn_t rc = enter_instance(st, __func__, gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    for (size_t j = 0; j < gpu->n_migs; j++) {
        if (gpu->migs[j].gi_id == owner->gi_id && gpu->migs[j].ci_id == id) {
            *computeInstance = &gpu->migs[j].ci_handle;
            return sim_state_unlock(st, NVML_SUCCESS);
        }
    }
    return sim_state_unlock(st, NVML_ERROR_NOT_FOUND);
}

/* ------------------------------------------------------------------------- */
/* Compute instances and their profiles */

static int find_compute_instance(sim_machine *m, nvmlComputeInstance_t ci, sim_gpu **gpu,
                                 sim_mig **mig) {
    if (m == NULL || ci == NULL) {
        return 0;
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        for (size_t j = 0; j < m->gpus[i].n_migs; j++) {
            if (ci == &m->gpus[i].migs[j].ci_handle) {
                *gpu = &m->gpus[i];
                *mig = &m->gpus[i].migs[j];
                return 1;
            }
        }
    }
    return 0;
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

static nvmlReturn_t compute_instance_info(sim_state *st, const char *call,
                                          nvmlComputeInstance_t computeInstance,
                                          nvmlComputeInstanceInfo_t *info) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_gpu *gpu;
    sim_mig *mig;
    if (!find_compute_instance(st->machine, computeInstance, &gpu, &mig) || info == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = enter_instance(st, call, gpu);
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
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, compute_instance_info(st, __func__, computeInstance, info));
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t *info) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, compute_instance_info(st, __func__, computeInstance, info));
}

/* The compute instance of a GPU instance that uses CI profile index `profile`. */
static nvmlReturn_t enter_ci_profile(sim_state *st, const char *call, nvmlGpuInstance_t gpuInstance,
                                     unsigned profile, unsigned engProfile, const void *info,
                                     sim_gpu **gpu, const sim_mig **mig) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_mig *owner;
    if (!find_gpu_instance(st->machine, gpuInstance, gpu, &owner) || info == NULL ||
        profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    nvmlReturn_t rc = enter_instance(st, call, *gpu);
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
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_ci_profile(st, __func__, gpuInstance, profile, engProfile, info,
                                       &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
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
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_mig *mig;
    nvmlReturn_t rc = enter_ci_profile(st, __func__, gpuInstance, profile, engProfile, info,
                                       &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    unsigned version = info->version;
    if (version != nvmlComputeInstanceProfileInfo_v2 &&
        version != nvmlComputeInstanceProfileInfo_v3) {
        return sim_state_unlock(st, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
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
    return sim_state_unlock(st, NVML_SUCCESS);
}
