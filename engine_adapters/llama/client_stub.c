/*
 * client_stub.c — a detached libmemdecay stand-in, built only while the real
 * client library is not in the tree.  Every call reports MD_EDETACHED, so the
 * adapter runs fail-open.
 */
#include <errno.h>
#include <string.h>
#include "memdecay.h"

const char *md_strerror(int err) { return err == MD_EDETACHED ? "detached (no libmemdecay)" : "error"; }
void md_client_config_init(struct md_client_config *cfg) { memset(cfg, 0, sizeof(*cfg)); cfg->budget_engine_pages = -1; cfg->budget_sequence_tokens = -1; }
int md_client_create(const struct md_client_config *cfg, md_client **out) { (void)cfg; *out = NULL; return MD_EDETACHED; }
int md_client_create_attached(const struct md_client_config *cfg, md_client **out) { (void)cfg; *out = NULL; return MD_EDETACHED; }
void md_client_destroy(md_client *c) { (void)c; }
int md_client_attached(const md_client *c) { (void)c; return 0; }
int md_client_reattach(md_client *c) { (void)c; return MD_EDETACHED; }
int md_client_check(md_client *c, uint32_t t) { (void)c; (void)t; return 0; }
const char *md_client_last_error(const md_client *c) { (void)c; return "no libmemdecay"; }
uint32_t md_client_engine_id(const md_client *c) { (void)c; return 0; }
uint64_t md_client_instance_id(const md_client *c) { (void)c; return 0; }
int md_client_params(md_client *c, struct md_params_view *o) { (void)c; (void)o; return MD_EDETACHED; }
int md_page_open(md_client *c, uint32_t s, uint64_t p, uint32_t n, uint64_t l, uint32_t *slot, uint32_t *gen) { (void)c; (void)s; (void)p; (void)n; (void)l; (void)slot; (void)gen; return MD_EDETACHED; }
int md_page_grow(md_client *c, uint32_t s, uint32_t n, uint64_t l) { (void)c; (void)s; (void)n; (void)l; return MD_EDETACHED; }
int md_page_free(md_client *c, uint32_t s, uint32_t r) { (void)c; (void)s; (void)r; return MD_EDETACHED; }
int md_seq_end(md_client *c, uint32_t s) { (void)c; (void)s; return MD_EDETACHED; }
int md_seq_step(md_client *c, uint32_t s, uint32_t n) { (void)c; (void)s; (void)n; return MD_EDETACHED; }
int md_attn_page(md_client *c, uint32_t s, float m, uint16_t r) { (void)c; (void)s; (void)m; (void)r; return MD_EDETACHED; }
int md_poll_commands(md_client *c, struct md_evict *o, size_t cap) { (void)c; (void)o; (void)cap; return 0; }
int md_wait_commands(md_client *c, int t) { (void)c; (void)t; return MD_EDETACHED; }
void md_client_counters(const md_client *c, struct md_client_counters *o) { (void)c; memset(o, 0, sizeof(*o)); }
