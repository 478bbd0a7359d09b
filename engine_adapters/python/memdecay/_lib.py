"""ctypes declarations of libmemdecay (engine_adapters/libmemdecay/include/
memdecay.h).  The structures mirror the C ones field for field; the test suite
checks their sizes and offsets against the C compiler's (tests/python/)."""
import ctypes
import ctypes.util
import errno
import os

# enum md_error and the page-free reasons (memdecay.h, memdecay_abi.h)
REFUSED = -1002     # MD_EREFUSED: the daemon said no (its message comes with it)
DETACHED = -1004
FULL = -1005
FINISHED = 0
EVICTED = 1
DROPPED = 2         # MD_FREE_DROPPED (ABI 1.4): a tier page's host copy released
# enum md_cmd_type (ABI 1.4: restore and drop come only to an engine with a host tier)
CMD_EVICT, CMD_RESTORE, CMD_DROP = 1, 2, 3
# what an apply callback returns for an evict it kept in the host tier (ABI 1.4)
KEPT_IN_TIER = 2
PAGE_FREE, PAGE_LIVE, PAGE_TIER = 0, 1, 2   # enum md_page_state
NOTSUP = -errno.ENOTSUP   # md_seq_set_options: a 1.0/1.1 daemon (kept in the mirror)
SEQ_ENGINE = 0xFFFFFFFF   # MD_SEQ_ENGINE_U32: a sequence option left to the engine
SEQ_RUNNING, SEQ_RETAINED = 0, 1   # enum md_seq_state (ABI 1.3)

_u32, _u64, _i64, _u16 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64, ctypes.c_uint16
REGIONS_MAX = 16   # MD_REGIONS_MAX (memdecay_abi.h); the layout test checks the sizes
_p = ctypes.c_void_p


class _Config(ctypes.Structure):
    _fields_ = [("socket_path", ctypes.c_char_p), ("engine_name", ctypes.c_char_p),
                ("page_tokens", _u32), ("page_capacity", _u32), ("max_seqs", _u32),
                ("tp_rank", _u32), ("tp_size", _u32), ("policy", ctypes.c_char_p),
                ("budget_engine_pages", _i64), ("budget_sequence_tokens", _i64),
                ("weight", ctypes.c_double), ("tier_pages", _u64), ("page_bytes", _u64)]


class _ParamsView(ctypes.Structure):
    _fields_ = [("policy", _u32), ("norm_mode", _u32), ("tau", ctypes.c_double),
                ("budget_sequence_tokens", _u64), ("budget_engine_pages", _u64),
                ("protect_recent", _u32), ("pinned_mask", _u32), ("seqlock", _u64),
                ("alpha", ctypes.c_double), ("beta", ctypes.c_double),
                ("low_watermark", ctypes.c_double), ("base", ctypes.c_double * REGIONS_MAX),
                ("lambda", ctypes.c_double * REGIONS_MAX)]


class _Evict(ctypes.Structure):
    _fields_ = [("seq", _u32), ("slot", _u32), ("gen", _u32), ("reason", _u32),
                ("decided_ns", _u64), ("type", _u32), ("resv", _u32)]

    def __repr__(self):
        return "Evict(type=%d, seq=%d, slot=%d, gen=%d, reason=%d)" % (
            self.type, self.seq, self.slot, self.gen, self.reason)


class _Counters(ctypes.Structure):
    _fields_ = [("attn_dropped", _u64), ("lifecycle_dropped", _u64), ("resyncs", _u64),
                ("cmds_applied", _u64), ("cmds_stale", _u64), ("reattaches", _u64)]


class _BatchResult(ctypes.Structure):
    _fields_ = [("steps", _u32), ("published", _u32), ("skipped", _u32), ("dropped", _u32)]


class _PageEntry(ctypes.Structure):
    _fields_ = [("version", _u32), ("generation", _u32), ("seq", _u32), ("n_tokens", _u16),
                ("state", ctypes.c_uint8), ("resv0", ctypes.c_uint8), ("first_pos", _u64),
                ("labels", _u64), ("open_clock", _u64), ("resv1", _u64)]


SESSION_LEN = 8     # MD_SEQ_SESSION_LEN: bytes of a session tag (ABI 1.3)


class _SeqOptions(ctypes.Structure):
    # session: bytes, not c_char, so that a tag's NUL padding is written as given
    _fields_ = [("size", _u32), ("policy", _u32), ("budget_sequence_tokens", _i64),
                ("state", _u32), ("session", ctypes.c_uint8 * SESSION_LEN)]


class _SettleResult(ctypes.Structure):
    _fields_ = [("outcome", _u32), ("applied", _u32), ("waited", _u32), ("resv", _u32),
                ("wait_ns", _u64)]


# md_apply_fn: int (*)(void *ctx, const struct md_evict *ev)
APPLY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Evict))

LAYOUTS = {"md_client_config": _Config, "md_params_view": _ParamsView, "md_evict": _Evict,
           "md_client_counters": _Counters, "md_batch_result": _BatchResult,
           "md_page_entry": _PageEntry, "md_seq_options": _SeqOptions,
           "md_settle_result": _SettleResult}

_I = ctypes.c_int
_PROTOS = {
    "md_strerror": (ctypes.c_char_p, [_I]),
    "md_region_name": (ctypes.c_char_p, [_u32]),
    "md_policy_name": (ctypes.c_char_p, [_u32]),
    "md_policy_from_name": (_I, [ctypes.c_char_p]),
    "md_control": (_I, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, _I]),
    "md_client_config_init": (None, [_p]),
    "md_client_create": (_I, [_p, _p]),
    "md_client_create_attached": (_I, [_p, _p]),
    "md_client_destroy": (None, [_p]),
    "md_client_attached": (_I, [_p]),
    "md_client_reattach": (_I, [_p]),
    "md_client_check": (_I, [_p, _u32]),
    "md_client_last_error": (ctypes.c_char_p, [_p]),
    "md_client_engine_id": (_u32, [_p]),
    "md_client_socket_path": (ctypes.c_char_p, [_p]),
    "md_client_live_pages": (_u32, [_p]),
    "md_client_counters": (None, [_p, _p]),
    "md_client_params": (_I, [_p, _p]),
    "md_page_info": (_I, [_p, _u32, _p]),
    "md_page_open": (_I, [_p, _u32, _u64, _u32, _u64, _p, _p]),
    "md_page_grow": (_I, [_p, _u32, _u32, _u64]),
    "md_page_free": (_I, [_p, _u32, _u32]),
    "md_seq_end": (_I, [_p, _u32]),
    "md_seq_step": (_I, [_p, _u32, _u32]),
    "md_seq_clock": (_u64, [_p, _u32]),
    "md_relabel": (_I, [_p, _u32, _u64, _u64, _u32]),
    "md_attn_page": (_I, [_p, _u32, ctypes.c_float, _u16]),
    "md_publish_batch": (_I, [_p, _p, _p, _u32, _p, _p, _p, _u32, _p]),
    "md_poll_commands": (_I, [_p, _p, ctypes.c_size_t]),
    "md_wait_commands": (_I, [_p, _I]),
    # the engine contract (libmemdecay 0.4, docs/adapters.md)
    "md_seq_options_init": (None, [_p]),
    "md_seq_set_options": (_I, [_p, _u32, _p]),
    "md_seq_get_options": (_I, [_p, _u32, _p]),
    "md_seq_session_tag": (None, [ctypes.c_char_p, ctypes.c_size_t, _p]),
    "md_seq_budget_tokens": (_u64, [_p, _u32]),
    "md_seq_live_tokens": (_u32, [_p, _u32]),
    "md_seq_pages": (_I, [_p, _u32, _p, _u32]),
    "md_seq_floor": (_u64, [_p, _u32]),
    "md_seq_protected_pages": (_u32, [_p, _u32]),
    "md_apply_commands": (_I, [_p, APPLY_FN, _p]),
    "md_settle": (_I, [_p, _p, _p, _u32, _u32, _I, APPLY_FN, _p, _p]),
    "md_settle_engine": (_I, [_p, _u32, _u32, _I, APPLY_FN, _p, _p]),
    "md_client_maintain": (_I, [_p, _u32, _u32]),
    # the host tier and recall (libmemdecay 0.5, ABI 1.4, docs/tier.md)
    "md_client_tier_budget": (_u64, [_p]),
    "md_client_tier_pages": (_u32, [_p]),
    "md_seq_tier_pages": (_I, [_p, _u32, _p, _u32]),
    "md_publish_estimates": (_I, [_p, _p, _p, _p, _u32, _p]),
    "md_settle_recall": (_I, [_p, _I, APPLY_FN, _p, _p]),
}

_loaded = {}


def load_library(path=None):
    """libmemdecay: `path`, else $MEMDECAY_LIBRARY, else the system's
    (ldconfig: the .deb installs it).  The error names what was tried."""
    path = path or os.environ.get("MEMDECAY_LIBRARY")
    tried = []
    candidates = [path] if path else [ctypes.util.find_library("memdecay"), "libmemdecay.so.3"]
    for cand in candidates:
        if not cand:
            continue
        if cand in _loaded:
            return _loaded[cand]
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append("%s (%s)" % (cand, e))
            continue
        missing = [n for n in _PROTOS if not hasattr(lib, n)]
        if missing:
            raise OSError("%s is an older libmemdecay: it lacks %s" % (cand, ", ".join(missing)))
        for name, (res, args) in _PROTOS.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _loaded[cand] = lib
        return lib
    raise OSError("libmemdecay not found (tried %s); set MEMDECAY_LIBRARY to the path of "
                  "libmemdecay.so (the build puts it in BUILD/lib/)"
                  % ("; ".join(tried) or "the system library path"))


def strerror(rc, library=None):
    return load_library(library).md_strerror(rc).decode()


class MemDecayError(OSError):
    """A libmemdecay call failed: `code` is its negative return value."""

    def __init__(self, code, what, detail=None):
        msg = strerror(code)
        super().__init__(-code, "%s: %s%s" % (what, msg, " (%s)" % detail if detail else ""))
        self.code = code
