/*
 * nvmlsim.h: the one internal header of nvmlsim, a stand-in for libnvidia-ml.so.1
 * that serves a simulated machine (built as the single shared library
 * gfd.sim._nvmlsim).
 *
 * This library exports the part of the NVML C ABI that gfd (through pynvml) and
 * similar consumers use, compiled against the real nvml.h, with NVML's return
 * codes, struct versions, reference-counted init and call semantics. What it
 * serves comes from a machine description written by gfd.sim (Python) as a
 * line-oriented text file; this library never parses YAML.
 *
 * Where things live (each NVML call is in the file named after its area):
 *   sim_config.c    reading a machine file (the format is documented once, in
 *                   docs/simulator.md, "The machine file"): the record loop, machine-wide
 *                   records, the machine's lifetime; gfdsim_configure, gfdsim_last_error
 *   sim_parse.c     the file's lexical layer: tokens, numbers, text, bus ids, messages
 *   sim_config_gpu.c  the records of one GPU and of its MIG devices
 *   sim_config_topology.c  pair and nvlink_p2p records, link peers, NVSwitch fabrics
 *   sim_faults.c    the one fault engine: the fault_* records and what they do to calls
 *                   (injected errors and delays), to GPU values (sim_value) and events;
 *                   the names and bounds of the GPU values
 *   sim_state.c     the library's mutable state (sim_state), its lock and the condition an
 *                   event wait sleeps on: the one file that holds a variable
 *   sim_core.c      call admission (init state, handles,
 *                   lost and vanished GPUs, links cut); nvmlInit*, nvmlShutdown,
 *                   nvmlErrorString, nvmlSystemGet{Driver,NVML,CudaDriver}Version
 *   sim_device.c    enumeration and identity: nvmlDeviceGetCount*, GetHandleBy*,
 *                   GetIndex, GetMinorNumber, GetName, GetUUID, GetSerial, GetPciInfo*,
 *                   GetArchitecture, GetBrand
 *   sim_memory.c    GetMemoryInfo*, GetCudaComputeCapability, GetComputeMode,
 *                   GetDisplayMode, GetNumaNodeId, GetCpuAffinity
 *   sim_topology.c  nvmlSystemGetTopologyGpuSet, GetTopologyCommonAncestor,
 *                   GetTopologyNearestGpus, GetP2PStatus, GetNvLink*, GetFieldValues
 *   sim_mig.c       GetMigMode, GetMaxMigDeviceCount, MIG device handles, GPU and
 *                   compute instances and their profiles
 *   sim_fabric.c    GetGpuFabricInfo*, GetVirtualizationMode
 *   sim_health.c    GetEccMode, GetTotalEccErrors, GetRemappedRows, GetRetiredPages*,
 *                   GetRetiredPagesPendingStatus
 *   sim_pcie.c      Get{Curr,Max}PcieLink{Generation,Width}, GetGpuMaxPcieLinkGeneration,
 *                   GetPcieReplayCounter, GetUtilizationRates
 *   sim_event_queue.c  posting events into the event sets, freeing them all
 *   sim_events.c    nvmlEventSetCreate, RegisterEvents, GetSupportedEventTypes,
 *                   nvmlEventSetWait*, nvmlEventSetFree
 *
 * Unit order, lowest first. A file calls functions only of the files on the rows above
 * its own, never of one on its row or below, so the calls between files form no circle
 * (tests/sim/test_sim_units.py reads this table and the sources, and fails on a call
 * upwards or sideways, and on a variable outside sim_state.c):
 *   1  sim_state.c
 *   2  sim_parse.c sim_event_queue.c
 *   3  sim_faults.c
 *   4  sim_config_gpu.c sim_config_topology.c
 *   5  sim_config.c
 *   6  sim_core.c
 *   7  sim_device.c sim_events.c sim_fabric.c sim_health.c sim_memory.c sim_mig.c sim_pcie.c
 *   8  sim_topology.c
 * The state is below everything: every call takes it there and hands it up. The reading of
 * a machine file (rows 2 to 5) knows nothing of calls; call admission and the lifecycle
 * (6) load machines and post events; the NVML calls (7, 8) go through admission.
 *
 * Symbols: the library is compiled with -fvisibility=default, so every non-static
 * function is exported. What one file shares with another (the sim_* functions below) is
 * declared here SIM_INTERNAL (hidden visibility) and stays
 * out of the dynamic symbol table; a helper used by one file stays static there.
 * The exported set is the nvml* calls plus gfdsim_configure and gfdsim_last_error
 * (tests/sim/test_sim_exports.py checks it against these sources).
 *
 * Every exported call is serialised by one mutex, so threads see NVML-like
 * consistency; only an event wait gives it up while it blocks. The state it guards lives in
 * one sim_state, in sim_state.c: a call takes it once (sim_state_lock), passes it, or the
 * machine in it, to the functions of other files it calls, and gives it back
 * (sim_state_unlock) as it returns; no file reaches for the state on its own. Handles are pointers
 * into this library's tables, compared by address before use, so a stale or foreign
 * handle yields INVALID_ARGUMENT rather than a crash.
 *
 * Every .c file of the library includes this header first (it sets the POSIX
 * level the system headers are read with).
 */

#ifndef GFD_SIM_NVMLSIM_H
#define GFD_SIM_NVMLSIM_H

#define _POSIX_C_SOURCE 200809L

#include <nvml.h>

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <time.h>

#define GFDSIM_API __attribute__((visibility("default")))
#define SIM_INTERNAL __attribute__((visibility("hidden")))

#define TEXT_MAX NVML_DEVICE_NAME_V2_BUFFER_SIZE
/* Bounds far above real hardware (gfd/facts/limits.py, which gfd checks first): a machine
 * file with more is refused, so that nothing quadratic in the GPUs runs away. NVLinks are
 * bounded by NVML_NVLINK_MAX_LINKS (their indices run below it). */
#define SIM_MAX_GPUS 128
#define SIM_MAX_MIG_DEVICES 16
/* The longest injected delay: an hour is a hung driver already. */
#define SIM_MAX_DELAY_MS 3600000u
/* Event sets open at once (a real driver held at least 65), and events queued on one set:
 * more are dropped, as from a full driver queue. One fault_event record posts at most a
 * queue's worth. */
#define SIM_MAX_EVENT_SETS 128
#define SIM_EVENT_QUEUE 64
#define SIM_MAX_EVENTS SIM_EVENT_QUEUE
#define BUS_ID_MAX NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
#define CALL_NAME_MAX 80
#define BITS_PER_WORD (sizeof(unsigned long) * CHAR_BIT)

/* Handle types nvml.h leaves opaque. Only their addresses are used. */
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
    int active; /* as the machine file gives it; see sim_link_active for faults */
    int has_remote_bus;
    char remote_bus[BUS_ID_MAX];
    int has_remote_type;
    unsigned remote_type;
    int remote_gpu;        /* the GPU of this machine at the far end, -1: none */
    long long down_after;  /* fault_nvlink_down: calls on the GPU before it goes down; -1 never */
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

/* Values a GPU serves that faults may change after N calls (fault_set, fault_rise): the
 * machine file's "value NAME N" records, by the names of sim_faults.c's table. Health
 * calls read them through sim_value. */
typedef enum {
    SIM_VALUE_ECC_CURRENT,             /* nvmlEnableState_t */
    SIM_VALUE_ECC_PENDING,             /* nvmlEnableState_t */
    SIM_VALUE_ECC_VOLATILE_CORRECTED,
    SIM_VALUE_ECC_VOLATILE_UNCORRECTED,
    SIM_VALUE_ECC_AGGREGATE_CORRECTED,
    SIM_VALUE_ECC_AGGREGATE_UNCORRECTED,
    SIM_VALUE_REMAPPED_CORRECTABLE,
    SIM_VALUE_REMAPPED_UNCORRECTABLE,
    SIM_VALUE_REMAPPED_PENDING,        /* 0/1 */
    SIM_VALUE_REMAPPED_FAILURE,        /* 0/1 */
    SIM_VALUE_RETIRED_SINGLE_BIT,      /* pages retired for multiple single-bit errors */
    SIM_VALUE_RETIRED_DOUBLE_BIT,      /* pages retired for a double-bit error */
    SIM_VALUE_RETIRED_PENDING,         /* nvmlEnableState_t */
    SIM_VALUE_EVENT_TYPES,             /* nvmlDeviceGetSupportedEventTypes mask */
    SIM_VALUE_PCIE_CURRENT_GENERATION, /* a link level: set, never risen */
    SIM_VALUE_PCIE_CURRENT_WIDTH,
    SIM_VALUE_PCIE_MAX_GENERATION,
    SIM_VALUE_PCIE_MAX_WIDTH,
    SIM_VALUE_PCIE_GPU_MAX_GENERATION,
    SIM_VALUE_PCIE_REPLAY_COUNTER,     /* a 32-bit count */
    SIM_VALUE_GPU_UTILIZATION,         /* percent */
    SIM_VALUE_FABRIC_STATE,            /* nvmlGpuFabricState_t; set by the fabric record */
    SIM_VALUE_FABRIC_STATUS,           /* nvmlReturn_t of the registration */
    SIM_VALUE_FABRIC_HEALTH,           /* healthMask; unset: a fabric record without one */
    SIM_VALUE_COUNT
} sim_value_id;

typedef struct {
    struct nvmlDevice_st handle;
    char name[TEXT_MAX];
    int has_name;
    char uuid[TEXT_MAX];
    int has_uuid;
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    int has_serial; /* 0: nvmlDeviceGetSerial answers NOT_SUPPORTED (no inforom) */
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
    int has_virtualization_mode;
    unsigned virtualization_mode; /* nvmlGpuVirtualizationMode_t */
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
    /* The state, status and health mask are the values SIM_VALUE_FABRIC_*: faults change them. */
    unsigned long long values[SIM_VALUE_COUNT];
    unsigned char has_value[SIM_VALUE_COUNT]; /* 0: NOT_SUPPORTED (until a fault_set) */
    /* runtime state */
    unsigned long long calls;
    long long lost_after; /* -1: never */
    int lost;
    long long vanish_after; /* -1: never; vanished once calls >= vanish_after */
} sim_gpu;

typedef struct {
    char call[CALL_NAME_MAX];
    int code;           /* NVML_SUCCESS for a delay */
    unsigned delay_ms;  /* fault_delay: the call takes this long first; 0: an error fault */
    int gpu;         /* -1: any */
    long long times; /* -1: always */
    long long used;
} sim_fault;

/* What a GPU's calls do to its values and events once it has answered `after` calls: the
 * fault_set, fault_rise and fault_event records, kept in file order. */
typedef enum { SIM_CHANGE_SET, SIM_CHANGE_RISE, SIM_CHANGE_EVENT } sim_change_kind;

typedef struct {
    sim_change_kind kind;
    int gpu;
    unsigned long long after;
    sim_value_id value;           /* SET, RISE */
    int supported;                /* SET: 0 makes the value NOT_SUPPORTED */
    unsigned long long amount;    /* SET: the value; RISE: added per call; EVENT: eventData */
    unsigned long long event_type; /* EVENT: one nvmlEventType bit */
    int mig;                      /* EVENT: index into the GPU's migs, -1 the whole GPU */
    unsigned times;               /* EVENT: how many events */
    int posted;                   /* EVENT: done */
} sim_change;

typedef struct {
    int has_driver;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int has_cuda;
    int cuda;
    sim_gpu *gpus;
    size_t n_gpus;
    int *levels; /* n_gpus * n_gpus, -1 unknown */
    signed char *p2p_nvlink; /* n_gpus * n_gpus NVLink P2P status as given, -1: derive */
    int *switch_group; /* per GPU: its NVSwitch fabric joined by trunks, -1: no switch link */
    sim_fault *faults;
    size_t n_faults;
    sim_change *changes;
    size_t n_changes;
    long long driver_not_loaded_inits;
    long long init_attempts;
} sim_machine;

/* ------------------------------------------------------------------------- */
/* The library's mutable state (sim_state.c, its one home) */

/* An event set: a slot of the state's table, handed out as the handle. */
typedef struct {
    int gpu; /* machine-file index */
    int mig; /* index into the GPU's migs, -1: the whole GPU */
    unsigned long long type;
    unsigned long long data;
} sim_queued_event;

struct nvmlEventSet_st {
    int in_use;
    unsigned generation; /* bumped when freed: a waiter no longer takes its events */
    unsigned long long recorded[SIM_MAX_GPUS]; /* event types recorded, per GPU */
    sim_queued_event queue[SIM_EVENT_QUEUE];
    unsigned head, count;
};

/* Everything a call may change. The one instance is sim_state.c's; a call takes it with
 * sim_state_lock and passes it on. The lock and the condition are sim_state.c's to use. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;      /* what an event wait checks changed */
    pthread_once_t changed_once; /* the condition is made on first use */
    sim_machine *machine;        /* NULL: none loaded */
    /* The machine replaced by the last configuration, freed only at the next one. Handles
     * are addresses inside a machine: freeing it at once would let the next machine's
     * allocation reuse them, and a stale handle of the machine just replaced would then
     * answer as a GPU of the new one instead of INVALID_ARGUMENT. */
    sim_machine *retired;
    int configured; /* gfdsim_configure was called with a path */
    unsigned init_count;
    char last_error[1024];
    /* Event sets live outside the machine, as NVML's do. */
    struct nvmlEventSet_st event_sets[SIM_MAX_EVENT_SETS];
} sim_state;

/* Take the lock and the state with it; every exported call does so once. */
SIM_INTERNAL sim_state *sim_state_lock(void);
/* Give the lock back; returns `rc`, so that a call ends `return sim_state_unlock(st, rc);`. */
SIM_INTERNAL nvmlReturn_t sim_state_unlock(sim_state *st, nvmlReturn_t rc);
/* Give the lock up until sim_state_wake or `deadline` (CLOCK_MONOTONIC), then take it
 * again; 1 when the deadline passed. */
SIM_INTERNAL int sim_state_wait(sim_state *st, const struct timespec *deadline);
/* Something a waiter checks changed (an event posted, a GPU lost, NVML shut down). */
SIM_INTERNAL void sim_state_wake(sim_state *st);
/* The message of the last failed configuration, read without the lock (gfdsim_last_error). */
SIM_INTERNAL const char *sim_state_last_error(void);

/* ------------------------------------------------------------------------- */
/* The configuration entry points (sim_config.c), exported */

GFDSIM_API int gfdsim_configure(const char *config_path);
GFDSIM_API const char *gfdsim_last_error(void);

/* ------------------------------------------------------------------------- */
/* Internal functions shared between files */

/* Reading a machine file: where the reader is, for messages ("<file>: line N: ..."). */
typedef struct {
    const char *path;
    unsigned line; /* 0: a problem of the whole file */
    char *error;
    size_t error_size;
} sim_parse_ctx;

/* sim_config.c */
/* Read a config file; return a machine, or NULL with `error` saying file, line and problem. */
SIM_INTERNAL sim_machine *sim_load_machine(const char *path, char *error, size_t error_size);

/* sim_parse.c: each parser returns 0, or -1 with ctx->error set (sim_parse_fail). */
SIM_INTERNAL int sim_parse_fail(sim_parse_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Split off the next space-separated token of *cursor; NULL at the end of the line. */
SIM_INTERNAL char *sim_next_token(char **cursor);
/* A C integer (decimal, or hex with 0x); -1 for anything else, "-" included. */
SIM_INTERNAL int sim_parse_ull(const char *token, unsigned long long *out);
SIM_INTERNAL int sim_parse_u32(const char *token, unsigned *out);
/* Exactly `count` unsigned 32-bit numbers from the rest of the line. */
SIM_INTERNAL int sim_parse_numbers(sim_parse_ctx *ctx, const char *key, char *rest, unsigned *out,
                                   int count);
/* Copy a record's text into a buffer of `size` bytes (refused when it does not fit). */
SIM_INTERNAL int sim_copy_text(sim_parse_ctx *ctx, const char *key, const char *value, char *dest,
                               size_t size);
/* "DDDDDDDD:BB:DD.F" (domain may be shorter); returns 0 and the numbers on success. */
SIM_INTERNAL int sim_parse_bus_id(const char *text, unsigned *domain, unsigned *bus,
                                  unsigned *device, unsigned *function);
/* realloc to count + 1 elements of `size`, the new one zeroed; NULL when out of memory. */
SIM_INTERNAL void *sim_grow(void *array, size_t count, size_t size);

/* sim_config_gpu.c: a record of the current GPU (or of its current MIG device). */
SIM_INTERNAL int sim_parse_gpu_record(sim_parse_ctx *ctx, sim_gpu *gpu, const char *key,
                                      char *value);

/* sim_config_topology.c */
/* A pair or nvlink_p2p record, read once every GPU is known. */
SIM_INTERNAL int sim_parse_topology_record(sim_parse_ctx *ctx, sim_machine *m, const char *key,
                                           char *value);
/* Which GPU of the machine each link ends at (by bus id), for faults that cut links. */
SIM_INTERNAL void sim_find_link_peers(sim_machine *m);
/* The NVSwitch fabric of each GPU (switch_group); -1 when out of memory. */
SIM_INTERNAL int sim_group_switches(sim_machine *m);

/* sim_faults.c: the fault engine */
/* A fault_* record, read once every GPU is known. */
SIM_INTERNAL int sim_parse_fault_record(sim_parse_ctx *ctx, sim_machine *m, const char *key,
                                        char *value);
/* Injected faults of an admitted call: every matching delay, then the first matching error. */
SIM_INTERNAL nvmlReturn_t sim_injected(sim_machine *m, const char *call, const int *gpus,
                                       int n_gpus);
/* The value's id by its machine-file name, -1 for none. */
SIM_INTERNAL int sim_value_named(const char *name);
/* Whether `v` is a value `id` can hold (a flag 0/1, a 32-bit count, an event mask, ...). */
SIM_INTERNAL int sim_value_fits(sim_value_id id, unsigned long long v);
/* A GPU's value as its calls so far leave it; 0 when NOT_SUPPORTED. Read by a call on the
 * GPU after it was admitted (counted). */
SIM_INTERNAL int sim_value(const sim_machine *m, const sim_gpu *gpu, sim_value_id id,
                           unsigned long long *out);
/* A call on `gpu` was just counted: the first fault_event record that became due and was
 * not posted yet, now marked posted; NULL when none is left. */
SIM_INTERNAL sim_change *sim_take_due_event(sim_machine *m, const sim_gpu *gpu);

/* sim_event_queue.c: the event sets of the state, beyond the calls on them (sim_events.c) */
/* Queue `times` events on every set recording `type` on the GPU, and wake waiters. */
SIM_INTERNAL void sim_post_event(sim_state *st, const sim_gpu *gpu, int mig,
                                 unsigned long long type, unsigned long long data,
                                 unsigned times);
/* Free one set: a wait on it no longer takes its events. */
SIM_INTERNAL void sim_free_event_set(nvmlEventSet_t set);
/* Free every event set (the last nvmlShutdown, a new machine) and wake their waiters. */
SIM_INTERNAL void sim_release_event_sets(sim_state *st);

/* sim_core.c: call admission; each returns NVML_SUCCESS or the code the call returns. */
/* Count a call on each GPU it names; a GPU past its lost_after is gone for good. */
SIM_INTERNAL nvmlReturn_t sim_admit(sim_state *st, const char *call, const int *gpus, int n_gpus);
/* A call that names no device: NVML must be initialised. */
SIM_INTERNAL nvmlReturn_t sim_enter_system(sim_state *st, const char *call);
/* Resolve a device handle (physical or MIG) and admit the call on its GPU. */
SIM_INTERNAL nvmlReturn_t sim_enter_device(sim_state *st, const char *call, nvmlDevice_t device,
                                           sim_gpu **gpu, sim_mig **mig);
/* Like sim_enter_device, but MIG handles are not accepted for this query. */
SIM_INTERNAL nvmlReturn_t sim_enter_physical(sim_state *st, const char *call, nvmlDevice_t device,
                                             sim_gpu **gpu);
/* Two physical GPUs, admitted on both (once when they are the same). */
SIM_INTERNAL nvmlReturn_t sim_enter_pair(sim_state *st, const char *call, nvmlDevice_t a,
                                         nvmlDevice_t b, sim_gpu **ga, sim_gpu **gb);
/* Copy a NUL-terminated string into a caller's buffer of `length` bytes, NVML style. */
SIM_INTERNAL nvmlReturn_t sim_copy_string(const char *value, char *dest, unsigned length);

/* sim_core.c: what faults leave of the machine. GPUs keep their machine-file index
 * (gpu->handle.gpu) inside the library; NVML's indices count only the GPUs that have
 * not vanished (fault_gpu_vanished). */
/* The GPU has answered its vanish_after calls: NVML no longer enumerates it. */
SIM_INTERNAL int sim_vanished(const sim_gpu *gpu);
/* How many GPUs NVML enumerates (nvmlDeviceGetCount). */
SIM_INTERNAL unsigned sim_visible_count(const sim_machine *m);
/* The GPU at NVML index `index`, NULL past the end. */
SIM_INTERNAL sim_gpu *sim_visible_gpu(sim_machine *m, unsigned index);
/* The NVML index of a GPU that has not vanished. */
SIM_INTERNAL unsigned sim_visible_index(const sim_machine *m, const sim_gpu *gpu);
/* A link of `gpu` cut by a fault: taken down (fault_nvlink_down) or its peer GPU vanished.
 * Asked by a call on `gpu`, after the call was admitted (counted). */
SIM_INTERNAL int sim_link_cut(const sim_machine *m, const sim_gpu *gpu, const sim_link *link);
/* Active as the machine file gives it and not cut. */
SIM_INTERNAL int sim_link_active(const sim_machine *m, const sim_gpu *gpu, const sim_link *link);

/* sim_device.c */
/* Fill an nvmlPciInfo_t from a GPU's bus id and PCI device id. */
SIM_INTERNAL void sim_fill_pci(const sim_gpu *gpu, nvmlPciInfo_t *pci);

#endif /* GFD_SIM_NVMLSIM_H */
