/*
 * A stand-in for NVIDIA's libnvidia-ml.so.1 on machines without a GPU.
 *
 * The real nvidia-ml-py (pynvml) loads this library through ctypes exactly as it loads
 * the driver's; only the GPU is imaginary. GPUs and their compute processes come from a
 * JSON file named by the FAKE_NVML_CONFIG environment variable, read again on every
 * query so a test can register processes while a run is going on:
 *
 *   {"driver_version": "580.95.05", "cuda_version": 13000, "release_delay_s": 0.0,
 *    "gpus": [{"uuid": "GPU-...", "name": "...", "memory_total_mib": 97887,
 *              "idle_used_mib": 3, "cc_major": 12, "cc_minor": 0}],
 *    "processes": [{"pid": 1234, "gpu": 0, "used_mib": 89000, "report_zombie": false}],
 *    "init_error": 0}
 *
 * "init_error" (an NVML return code, e.g. 18 NVML_ERROR_LIB_RM_VERSION_MISMATCH) makes
 * nvmlInit fail with it, as a host whose kernel driver and library disagree does.
 *
 * Health readings, per GPU (all optional; the defaults are a healthy PCIe GPU):
 *   "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
 *   "retired_pages_sbe": 0, "retired_pages_dbe": 0, "retired_pages_pending": false,
 *   "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false},
 *   "clocks_event_reasons": 0 (NVML's bit mask: 0x8 HW slowdown, 0x20/0x40 SW/HW thermal,
 *                              0x4 SW power cap, 0x80 power brake, 0x1 idle),
 *   "pcie_gen": [current, max] (default [5, 5]), "pcie_width": [current, max] ([16, 16]),
 *   "persistence_mode": true, "pci_bus": 24 (the GPU's PCI address is 00000000:BUS:00.0;
 *                              default 0x18 + index: kernel-log XIDs name it),
 *   "fabric": {"state": 3, "status": 0} (NVML_GPU_FABRIC_STATE_*; absent = not an NVSwitch
 *             system: the fabric calls answer Not Supported, as on a PCIe card),
 *   "xids": [79, 48] (critical XID events: delivered once to each event set registered for
 *           nvmlEventTypeXidCriticalError on this GPU, then nvmlEventSetWait times out),
 *   "unsupported": ["ecc", "retired_pages", "remapped_rows", "clocks", "pcie",
 *                   "persistence", "events"] (those calls answer NVML_ERROR_NOT_SUPPORTED,
 *                   as a GPU without ECC or an older generation does: not supported is not 0).
 *
 * Topology, per GPU: "nvlink_links": 18 (links up; absent or 0 = a PCIe card, whose
 * nvmlDeviceGetNvLinkState answers Not Supported); top level: "p2p_status": 0 (what
 * nvmlDeviceGetP2PStatus answers for every pair: NVML_P2P_STATUS_*, 0 = OK, 1 = chipset
 * not supported, 4 = disabled by regkey). "failing": ["compute_capability", "nvlink",
 * "p2p"] per GPU makes those calls fail with NVML_ERROR_UNKNOWN (a driver that errs on
 * one call while the others answer).
 *
 * A process is reported only while its pid is alive (kill(pid, 0)) and not a zombie
 * (a real driver frees a context when the process exits, before it is reaped), unless
 * "report_zombie" is true (a driver that did not release). With "release_delay_s" > 0
 * its memory stays counted as used, with no process listed, for that long after the fake
 * first saw it gone (times kept in FAKE_NVML_CONFIG + ".deaths", so every process that
 * loads the library agrees).
 *
 * JSON parsing: a small hand-written recursive-descent parser for objects, arrays,
 * strings (no \u escapes), numbers, true/false/null. Enough for the files the tests write.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10, NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_UNKNOWN = 999
};

/* Calls that fail on a GPU ("failing" in the config). */
enum { FAIL_CC = 1 << 0, FAIL_NVLINK = 1 << 1, FAIL_P2P = 1 << 2 };

/* Readings a GPU may not support ("unsupported" in the config). */
enum {
    UNSUP_ECC = 1 << 0, UNSUP_RETIRED = 1 << 1, UNSUP_REMAP = 1 << 2, UNSUP_CLOCKS = 1 << 3,
    UNSUP_PCIE = 1 << 4, UNSUP_PERSIST = 1 << 5, UNSUP_EVENTS = 1 << 6
};
#define XID_CRITICAL_EVENT 0x8ULL
#define MAX_XIDS 32
#define MAX_EVENT_SETS 64

#define MAX_GPUS 64
#define MAX_PROCS 1024
#define MIB (1024ULL * 1024ULL)

typedef struct {
    unsigned int index;
    char uuid[96];
    char name[96];
    unsigned long long total_mib, idle_used_mib;
    int cc_major, cc_minor;
    /* health readings */
    unsigned long long ecc_volatile, ecc_aggregate, clocks_event_reasons;
    unsigned int retired_sbe, retired_dbe, retired_pending;
    unsigned int remap_corrected, remap_uncorrected, remap_pending, remap_failure;
    unsigned int pcie_gen[2], pcie_width[2]; /* current, max */
    unsigned int persistence_mode;
    int has_fabric;
    unsigned int fabric_state, fabric_status;
    unsigned long long xids[MAX_XIDS];
    unsigned int xid_count;
    unsigned int unsupported;
    unsigned int nvlink_links, failing;
    unsigned int pci_bus; /* the GPU sits at 00000000:BUS:00.0 (default 0x18 + index) */
} fake_gpu;
typedef fake_gpu *nvmlDevice_t;

typedef struct {
    unsigned int pid, gpu;
    unsigned long long used_mib;
    int report_zombie;
} fake_proc;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static fake_gpu gpus[MAX_GPUS];
static fake_proc procs[MAX_PROCS];
static unsigned int gpu_count, proc_count;
/* A config is parsed into these, then copied over the live tables in one step: every call
 * re-reads the config (the "driver's" view is live), and in a multi-host run on one machine
 * two threads call at once; parsing in place showed the other thread an empty GPU table
 * ("Invalid Argument" for a handle it held). */
static fake_gpu staged_gpus[MAX_GPUS];
static fake_proc staged_procs[MAX_PROCS];
static unsigned int staged_gpu_count, staged_proc_count;
static double staged_release_delay_s;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static char driver_version[80] = "580.95.05";
static int cuda_version = 13000;
static double release_delay_s;
static int init_error;
static int p2p_status; /* what nvmlDeviceGetP2PStatus answers for every pair */
static int init_count;

/* ---- minimal JSON ---------------------------------------------------------------- */

typedef struct { const char *p; int ok; } cursor;

static void skip_ws(cursor *c) { while (isspace((unsigned char)*c->p)) c->p++; }

static int parse_string(cursor *c, char *out, size_t cap) {
    size_t n = 0;
    skip_ws(c);
    if (*c->p != '"') return c->ok = 0;
    c->p++;
    while (*c->p && *c->p != '"') {
        char ch = *c->p++;
        if (ch == '\\' && *c->p) {
            ch = *c->p++;
            if (ch == 'n') ch = '\n'; else if (ch == 't') ch = '\t';
        }
        if (out && n + 1 < cap) out[n++] = ch;
    }
    if (out && cap) out[n] = 0;
    if (*c->p != '"') return c->ok = 0;
    c->p++;
    return 1;
}

static double parse_number(cursor *c) {
    char *end;
    double value;
    skip_ws(c);
    value = strtod(c->p, &end);
    if (end == c->p) { c->ok = 0; return 0; }
    c->p = end;
    return value;
}

static void skip_value(cursor *c);

static void skip_container(cursor *c, char close) {
    c->p++;
    skip_ws(c);
    if (*c->p == close) { c->p++; return; }
    while (c->ok) {
        if (close == '}') {
            parse_string(c, NULL, 0);
            skip_ws(c);
            if (*c->p++ != ':') { c->ok = 0; return; }
        }
        skip_value(c);
        skip_ws(c);
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == close) { c->p++; return; }
        c->ok = 0;
    }
}

static void skip_value(cursor *c) {
    skip_ws(c);
    if (*c->p == '{') skip_container(c, '}');
    else if (*c->p == '[') skip_container(c, ']');
    else if (*c->p == '"') parse_string(c, NULL, 0);
    else if (!strncmp(c->p, "true", 4)) c->p += 4;
    else if (!strncmp(c->p, "false", 5)) c->p += 5;
    else if (!strncmp(c->p, "null", 4)) c->p += 4;
    else parse_number(c);
}

static int parse_bool(cursor *c) {
    skip_ws(c);
    if (!strncmp(c->p, "true", 4)) { c->p += 4; return 1; }
    if (!strncmp(c->p, "false", 5)) { c->p += 5; return 0; }
    c->ok = 0;
    return 0;
}

/* Calls on_key(key, cursor, ctx) for each member; on_key must consume the value. */
typedef void (*member_fn)(const char *key, cursor *c, void *ctx);

static void parse_object(cursor *c, member_fn on_key, void *ctx) {
    char key[64];
    skip_ws(c);
    if (*c->p != '{') { c->ok = 0; return; }
    c->p++;
    skip_ws(c);
    if (*c->p == '}') { c->p++; return; }
    while (c->ok) {
        parse_string(c, key, sizeof key);
        skip_ws(c);
        if (*c->p++ != ':') { c->ok = 0; return; }
        on_key(key, c, ctx);
        skip_ws(c);
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == '}') { c->p++; return; }
        c->ok = 0;
    }
}

typedef void (*item_fn)(cursor *c, void *ctx);

static void parse_array(cursor *c, item_fn on_item, void *ctx) {
    skip_ws(c);
    if (*c->p != '[') { c->ok = 0; return; }
    c->p++;
    skip_ws(c);
    if (*c->p == ']') { c->p++; return; }
    while (c->ok) {
        on_item(c, ctx);
        skip_ws(c);
        if (*c->p == ',') { c->p++; continue; }
        if (*c->p == ']') { c->p++; return; }
        c->ok = 0;
    }
}

/* ---- config ---------------------------------------------------------------------- */

typedef struct { unsigned int *values; unsigned int cap, n; } uint_list;

static void uint_item(cursor *c, void *ctx) {
    uint_list *list = ctx;
    unsigned int value = (unsigned int)parse_number(c);
    if (list->n < list->cap) list->values[list->n] = value;
    list->n++;
}

/* [current, max] */
static void parse_pair(cursor *c, unsigned int pair[2]) {
    uint_list list = {pair, 2, 0};
    parse_array(c, uint_item, &list);
}

static void xid_item(cursor *c, void *ctx) {
    fake_gpu *g = ctx;
    unsigned long long xid = (unsigned long long)parse_number(c);
    if (g->xid_count < MAX_XIDS) g->xids[g->xid_count++] = xid;
}

static void unsupported_item(cursor *c, void *ctx) {
    static const char *names[] = {"ecc", "retired_pages", "remapped_rows", "clocks", "pcie", "persistence", "events"};
    fake_gpu *g = ctx;
    char name[32];
    unsigned int i;
    parse_string(c, name, sizeof name);
    for (i = 0; i < sizeof names / sizeof *names; i++) {
        if (!strcmp(name, names[i])) g->unsupported |= 1u << i;
    }
}

static void failing_item(cursor *c, void *ctx) {
    static const char *names[] = {"compute_capability", "nvlink", "p2p"};
    fake_gpu *g = ctx;
    char name[32];
    unsigned int i;
    parse_string(c, name, sizeof name);
    for (i = 0; i < sizeof names / sizeof *names; i++) {
        if (!strcmp(name, names[i])) g->failing |= 1u << i;
    }
}

static void remap_member(const char *key, cursor *c, void *ctx) {
    fake_gpu *g = ctx;
    if (!strcmp(key, "corrected")) g->remap_corrected = (unsigned int)parse_number(c);
    else if (!strcmp(key, "uncorrected")) g->remap_uncorrected = (unsigned int)parse_number(c);
    else if (!strcmp(key, "pending")) g->remap_pending = (unsigned int)parse_bool(c);
    else if (!strcmp(key, "failure")) g->remap_failure = (unsigned int)parse_bool(c);
    else skip_value(c);
}

static void fabric_member(const char *key, cursor *c, void *ctx) {
    fake_gpu *g = ctx;
    if (!strcmp(key, "state")) g->fabric_state = (unsigned int)parse_number(c);
    else if (!strcmp(key, "status")) g->fabric_status = (unsigned int)parse_number(c);
    else skip_value(c);
}

/* The health members of a GPU; returns 0 when key is not one of them. */
static int health_member(const char *key, cursor *c, fake_gpu *g) {
    if (!strcmp(key, "ecc_uncorrected_volatile")) g->ecc_volatile = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "ecc_uncorrected_aggregate")) g->ecc_aggregate = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "retired_pages_sbe")) g->retired_sbe = (unsigned int)parse_number(c);
    else if (!strcmp(key, "retired_pages_dbe")) g->retired_dbe = (unsigned int)parse_number(c);
    else if (!strcmp(key, "retired_pages_pending")) g->retired_pending = (unsigned int)parse_bool(c);
    else if (!strcmp(key, "remapped_rows")) parse_object(c, remap_member, g);
    else if (!strcmp(key, "clocks_event_reasons")) g->clocks_event_reasons = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "pcie_gen")) parse_pair(c, g->pcie_gen);
    else if (!strcmp(key, "pcie_width")) parse_pair(c, g->pcie_width);
    else if (!strcmp(key, "persistence_mode")) g->persistence_mode = (unsigned int)parse_bool(c);
    else if (!strcmp(key, "fabric")) { g->has_fabric = 1; parse_object(c, fabric_member, g); }
    else if (!strcmp(key, "xids")) parse_array(c, xid_item, g);
    else if (!strcmp(key, "unsupported")) parse_array(c, unsupported_item, g);
    else if (!strcmp(key, "pci_bus")) g->pci_bus = (unsigned int)parse_number(c);
    else if (!strcmp(key, "nvlink_links")) g->nvlink_links = (unsigned int)parse_number(c);
    else if (!strcmp(key, "failing")) parse_array(c, failing_item, g);
    else return 0;
    return 1;
}

static void gpu_member(const char *key, cursor *c, void *ctx) {
    fake_gpu *g = ctx;
    if (health_member(key, c, g)) return;
    if (!strcmp(key, "uuid")) parse_string(c, g->uuid, sizeof g->uuid);
    else if (!strcmp(key, "name")) parse_string(c, g->name, sizeof g->name);
    else if (!strcmp(key, "memory_total_mib")) g->total_mib = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "idle_used_mib")) g->idle_used_mib = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "cc_major")) g->cc_major = (int)parse_number(c);
    else if (!strcmp(key, "cc_minor")) g->cc_minor = (int)parse_number(c);
    else skip_value(c);
}

static void gpu_item(cursor *c, void *ctx) {
    (void)ctx;
    if (staged_gpu_count >= MAX_GPUS) { skip_value(c); return; }
    fake_gpu *g = &staged_gpus[staged_gpu_count];
    memset(g, 0, sizeof *g);
    g->index = staged_gpu_count;
    snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%u", staged_gpu_count);
    snprintf(g->name, sizeof g->name, "Fake GPU");
    g->total_mib = 1024;
    g->pcie_gen[0] = g->pcie_gen[1] = 5;
    g->pcie_width[0] = g->pcie_width[1] = 16;
    g->persistence_mode = 1;
    g->pci_bus = 0x18 + staged_gpu_count;
    parse_object(c, gpu_member, g);
    staged_gpu_count++;
}

static void proc_member(const char *key, cursor *c, void *ctx) {
    fake_proc *p = ctx;
    if (!strcmp(key, "pid")) p->pid = (unsigned int)parse_number(c);
    else if (!strcmp(key, "gpu")) p->gpu = (unsigned int)parse_number(c);
    else if (!strcmp(key, "used_mib")) p->used_mib = (unsigned long long)parse_number(c);
    else if (!strcmp(key, "report_zombie")) p->report_zombie = parse_bool(c);
    else skip_value(c);
}

static void proc_item(cursor *c, void *ctx) {
    (void)ctx;
    if (staged_proc_count >= MAX_PROCS) { skip_value(c); return; }
    fake_proc *p = &staged_procs[staged_proc_count];
    memset(p, 0, sizeof *p);
    parse_object(c, proc_member, p);
    staged_proc_count++;
}

static void top_member(const char *key, cursor *c, void *ctx) {
    (void)ctx;
    if (!strcmp(key, "gpus")) parse_array(c, gpu_item, NULL);
    else if (!strcmp(key, "processes")) parse_array(c, proc_item, NULL);
    else if (!strcmp(key, "driver_version")) parse_string(c, driver_version, sizeof driver_version);
    else if (!strcmp(key, "cuda_version")) cuda_version = (int)parse_number(c);
    else if (!strcmp(key, "release_delay_s")) staged_release_delay_s = parse_number(c);
    else if (!strcmp(key, "init_error")) init_error = (int)parse_number(c);
    else if (!strcmp(key, "p2p_status")) p2p_status = (int)parse_number(c);
    else skip_value(c);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

static nvmlReturn_t load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    char *text;
    cursor c;
    if (!path || !*path) return NVML_ERROR_DRIVER_NOT_LOADED;
    text = read_all(path);
    if (!text) return NVML_ERROR_DRIVER_NOT_LOADED;
    pthread_mutex_lock(&config_lock);
    staged_gpu_count = staged_proc_count = 0;
    staged_release_delay_s = 0;
    init_error = 0;
    p2p_status = 0;
    c.p = text;
    c.ok = 1;
    parse_object(&c, top_member, NULL);
    free(text);
    memcpy(gpus, staged_gpus, staged_gpu_count * sizeof *gpus);
    memcpy(procs, staged_procs, staged_proc_count * sizeof *procs);
    gpu_count = staged_gpu_count;
    proc_count = staged_proc_count;
    release_delay_s = staged_release_delay_s;
    pthread_mutex_unlock(&config_lock);
    if (c.ok && init_error) return (nvmlReturn_t)init_error;
    return c.ok ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

/* ---- process liveness ------------------------------------------------------------ */

static int is_zombie(unsigned int pid) {
    char path[64], buf[512], *close;
    FILE *f;
    size_t n;
    snprintf(path, sizeof path, "/proc/%u/stat", pid);
    f = fopen(path, "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    close = strrchr(buf, ')');
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

static int present(const fake_proc *p) {
    if (p->pid == 0) return 0;
    if (kill((pid_t)p->pid, 0) != 0 && errno != EPERM) return 0;
    return p->report_zombie || !is_zombie(p->pid);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* When did the fake first see pid gone? Recorded on first sight, shared by file. */
static double first_seen_gone(unsigned int pid) {
    const char *config = getenv("FAKE_NVML_CONFIG");
    char path[4096], line[128];
    unsigned int seen_pid;
    double when, now = now_s();
    FILE *f;
    snprintf(path, sizeof path, "%s.deaths", config ? config : "");
    f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (sscanf(line, "%u %lf", &seen_pid, &when) == 2 && seen_pid == pid) {
                fclose(f);
                return when;
            }
        }
        fclose(f);
    }
    f = fopen(path, "a");
    if (f) {
        fprintf(f, "%u %.3f\n", pid, now);
        fclose(f);
    }
    return now;
}

static int lingering(const fake_proc *p) {
    if (release_delay_s <= 0 || p->pid == 0) return 0;
    return now_s() - first_seen_gone(p->pid) < release_delay_s;
}

static unsigned long long used_mib(const fake_gpu *g) {
    unsigned long long total = g->idle_used_mib;
    unsigned int i;
    for (i = 0; i < proc_count; i++) {
        if (procs[i].gpu != g->index) continue;
        if (present(&procs[i]) || lingering(&procs[i])) total += procs[i].used_mib;
    }
    return total > g->total_mib ? g->total_mib : total;
}

/* ---- the NVML entry points pynvml calls ------------------------------------------ */

#define REQUIRE_INIT() do { if (init_count <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)
#define REQUIRE_DEVICE(d) do { \
    if (!(d) || (d) < gpus || (d) >= gpus + gpu_count) return NVML_ERROR_INVALID_ARGUMENT; \
} while (0)

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    nvmlReturn_t ret;
    (void)flags;
    ret = load_config();
    pthread_mutex_lock(&init_lock);
    if (ret == NVML_SUCCESS) init_count++;
    pthread_mutex_unlock(&init_lock);
    return ret;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&init_lock);
    if (init_count <= 0) ret = NVML_ERROR_UNINITIALIZED;
    else init_count--;
    pthread_mutex_unlock(&init_lock);
    return ret;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(const char *src, char *dst, unsigned int length) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    REQUIRE_INIT();
    return copy_string(driver_version, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    REQUIRE_INIT();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = cuda_version;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    char path[64], buf[256];
    FILE *f;
    size_t n;
    REQUIRE_INIT();
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    f = fopen(path, "r");
    if (!f) return NVML_ERROR_NOT_FOUND;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    if (n && buf[n - 1] == '\n') buf[n - 1] = 0;
    return copy_string(buf, name, length);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    REQUIRE_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    load_config();
    *count = gpu_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    REQUIRE_INIT();
    if (!device || index >= gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    unsigned int i;
    REQUIRE_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < gpu_count; i++) {
        if (!strcmp(gpus[i].uuid, uuid)) { *device = &gpus[i]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    return copy_string(device->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    return copy_string(device->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->failing & FAIL_CC) return NVML_ERROR_UNKNOWN;
    *major = device->cc_major;
    *minor = device->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    unsigned long long used;
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    load_config();
    used = used_mib(device);
    memory->total = device->total_mib * MIB;
    memory->used = used * MIB;
    memory->free = (device->total_mib - used) * MIB;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlMemory_t v1;
    nvmlReturn_t ret;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    ret = nvmlDeviceGetMemoryInfo(device, &v1);
    if (ret != NVML_SUCCESS) return ret;
    memory->total = v1.total;
    memory->reserved = 0;
    memory->used = v1.used;
    memory->free = v1.free;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    unsigned int i, n = 0, cap;
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    load_config();
    cap = infos ? *infoCount : 0;
    for (i = 0; i < proc_count; i++) {
        if (procs[i].gpu != device->index || !present(&procs[i])) continue;
        if (n < cap) {
            infos[n].pid = procs[i].pid;
            infos[n].usedGpuMemory = procs[i].used_mib * MIB;
            infos[n].gpuInstanceId = 0xFFFFFFFFu;
            infos[n].computeInstanceId = 0xFFFFFFFFu;
        }
        n++;
    }
    *infoCount = n;
    if (n > cap) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    (void)infos;
    if (!infoCount) return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

/* ---- health readings ------------------------------------------------------------- */

/* The live reading of one GPU: the config is read again first (a test may change a
 * counter while a run is going on), as for memory and processes. */
#define READING(device, flag) do { \
    REQUIRE_INIT(); \
    REQUIRE_DEVICE(device); \
    load_config(); \
    if ((device)->unsupported & (flag)) return NVML_ERROR_NOT_SUPPORTED; \
} while (0)

enum { MEMORY_ERROR_UNCORRECTED = 1, VOLATILE_ECC = 0, AGGREGATE_ECC = 1 };

nvmlReturn_t nvmlDeviceGetTotalEccErrors(
    nvmlDevice_t device, int errorType, int counterType, unsigned long long *count) {
    READING(device, UNSUP_ECC);
    if (!count || (counterType != VOLATILE_ECC && counterType != AGGREGATE_ECC)) return NVML_ERROR_INVALID_ARGUMENT;
    if (errorType != MEMORY_ERROR_UNCORRECTED) { *count = 0; return NVML_SUCCESS; }
    *count = counterType == VOLATILE_ECC ? device->ecc_volatile : device->ecc_aggregate;
    return NVML_SUCCESS;
}

/* cause 0: multiple single-bit ECC errors, 1: a double-bit ECC error. Addresses are
 * made up (one page each); what a caller reads is how many. */
nvmlReturn_t nvmlDeviceGetRetiredPages(
    nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses) {
    unsigned int n, i;
    READING(device, UNSUP_RETIRED);
    if (!pageCount || (cause != 0 && cause != 1)) return NVML_ERROR_INVALID_ARGUMENT;
    n = cause == 0 ? device->retired_sbe : device->retired_dbe;
    if (!addresses || *pageCount < n) { *pageCount = n; return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS; }
    for (i = 0; i < n; i++) addresses[i] = 0x1000ULL * (i + 1) + (unsigned long long)cause;
    *pageCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *isPending) {
    READING(device, UNSUP_RETIRED);
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    *isPending = device->retired_pending;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    READING(device, UNSUP_REMAP);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = device->remap_corrected;
    *uncRows = device->remap_uncorrected;
    *isPending = device->remap_pending;
    *failureOccurred = device->remap_failure;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    READING(device, UNSUP_CLOCKS);
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = device->clocks_event_reasons;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

static nvmlReturn_t pcie_reading(nvmlDevice_t device, const unsigned int *pair, int which, unsigned int *out) {
    READING(device, UNSUP_PCIE);
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = pair[which];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    return device ? pcie_reading(device, device->pcie_gen, 0, gen) : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    return device ? pcie_reading(device, device->pcie_gen, 1, gen) : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    return device ? pcie_reading(device, device->pcie_width, 0, width) : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    return device ? pcie_reading(device, device->pcie_width, 1, width) : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode) {
    READING(device, UNSUP_PERSIST);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = device->persistence_mode;
    return NVML_SUCCESS;
}

/* nvmlGpuFabricInfo_t (v1) and nvmlGpuFabricInfo_v2_t (the versioned call's). */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId, state;
} nvmlGpuFabricInfo_t;
typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId, state, healthMask;
} nvmlGpuFabricInfo_v2_t;

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    READING(device, 0);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->has_fabric) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->status = (nvmlReturn_t)device->fabric_status;
    info->state = device->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t *info) {
    nvmlGpuFabricInfo_t v1;
    nvmlReturn_t ret;
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    ret = nvmlDeviceGetGpuFabricInfo(device, &v1);
    if (ret != NVML_SUCCESS) return ret;
    info->status = v1.status;
    info->cliqueId = 0;
    info->state = v1.state;
    info->healthMask = 0;
    memset(info->clusterUuid, 0, sizeof info->clusterUuid);
    return NVML_SUCCESS;
}

/* ---- XID events ------------------------------------------------------------------ */

/* An event set remembers which GPUs registered for critical XIDs and how many of each
 * GPU's configured XIDs it has delivered: events arrive only while a set is registered,
 * as with the real driver, and each once. */
typedef struct {
    int in_use;
    unsigned long long mask[MAX_GPUS];
    unsigned int delivered[MAX_GPUS];
} fake_event_set;
typedef fake_event_set *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

static fake_event_set event_sets[MAX_EVENT_SETS];
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    unsigned int i;
    REQUIRE_INIT();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&events_lock);
    for (i = 0; i < MAX_EVENT_SETS && event_sets[i].in_use; i++) {}
    if (i < MAX_EVENT_SETS) {
        memset(&event_sets[i], 0, sizeof event_sets[i]);
        event_sets[i].in_use = 1;
        *set = &event_sets[i];
    }
    pthread_mutex_unlock(&events_lock);
    return i < MAX_EVENT_SETS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set || set < event_sets || set >= event_sets + MAX_EVENT_SETS) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&events_lock);
    set->in_use = 0;
    pthread_mutex_unlock(&events_lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    READING(device, UNSUP_EVENTS);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = XID_CRITICAL_EVENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    READING(device, UNSUP_EVENTS);
    if (!set || set < event_sets || set >= event_sets + MAX_EVENT_SETS) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~XID_CRITICAL_EVENT) return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&events_lock);
    set->mask[device->index] |= types;
    pthread_mutex_unlock(&events_lock);
    return NVML_SUCCESS;
}

/* The next undelivered XID of a registered GPU, else a timeout after timeoutms (slept, as
 * the real call blocks). */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    unsigned int i;
    struct timespec pause;
    REQUIRE_INIT();
    if (!set || !data || set < event_sets || set >= event_sets + MAX_EVENT_SETS) return NVML_ERROR_INVALID_ARGUMENT;
    load_config();
    pthread_mutex_lock(&events_lock);
    for (i = 0; i < gpu_count; i++) {
        if (!(set->mask[i] & XID_CRITICAL_EVENT) || set->delivered[i] >= gpus[i].xid_count) continue;
        memset(data, 0, sizeof *data);
        data->device = &gpus[i];
        data->eventType = XID_CRITICAL_EVENT;
        data->eventData = gpus[i].xids[set->delivered[i]++];
        data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
        pthread_mutex_unlock(&events_lock);
        return NVML_SUCCESS;
    }
    pthread_mutex_unlock(&events_lock);
    pause.tv_sec = timeoutms / 1000;
    pause.tv_nsec = (long)(timeoutms % 1000) * 1000000L;
    nanosleep(&pause, NULL);
    return NVML_ERROR_TIMEOUT;
}
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ---- PCI ------------------------------------------------------------------------- */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    REQUIRE_INIT();
    REQUIRE_DEVICE(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = device->pci_bus & 0xFF;
    pci->pciDeviceId = 0x2BB510DE;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
    snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) { return nvmlDeviceGetPciInfo_v3(device, pci); }

/* ---- topology -------------------------------------------------------------------- */

#define NVLINK_MAX_LINKS 18

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *isActive) {
    READING(device, 0);
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->failing & FAIL_NVLINK) return NVML_ERROR_UNKNOWN;
    if (!device->nvlink_links) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = link < device->nvlink_links;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, int p2pIndex, int *p2pStatus) {
    (void)p2pIndex;
    READING(device1, 0);
    REQUIRE_DEVICE(device2);
    if (!p2pStatus) return NVML_ERROR_INVALID_ARGUMENT;
    if ((device1->failing | device2->failing) & FAIL_P2P) return NVML_ERROR_UNKNOWN;
    *p2pStatus = p2p_status;
    return NVML_SUCCESS;
}
