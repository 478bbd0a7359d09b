/*
 * check_gpu_publisher.c — libmemdecay's GPU publisher (memdecay.h md_gpu_*)
 * on every path a machine without a device takes, against a real memdecayd
 * (argv[1]).  Checked: bad arguments are -EINVAL and change nothing; a build
 * without CUDA answers -ENOTSUP ("built without CUDA"), a CUDA build without a
 * device -ENODEV quoting cudaGetDeviceCount; either way no publisher is
 * returned, the client keeps its attachment (same engine id and instance, no
 * reattach) and the host ring still serves it end to end: pages over
 * budget come back as eviction commands.  The same holds for a detached
 * client.  With a device the device-side paths are bench/gpu/gpu_e2e.c's.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "md_kernels_cuda.h"
#include "memdecay.h"
#include "memdecay_clock.h"

static const char *g_daemon;
static char g_dir[64], g_sock[128];
static pid_t g_pid = -1;

static void start_daemon(void)
{
	snprintf(g_dir, sizeof(g_dir), "/tmp/md-gpupub.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(g_dir));
	snprintf(g_sock, sizeof(g_sock), "%s/memdecayd.sock", g_dir);
	g_pid = fork();
	ck_assert_int_ge(g_pid, 0);
	if (g_pid == 0) {
		execl(g_daemon, g_daemon, "--socket", g_sock, "--foreground", "--log-level", "warn",
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		struct stat st;
		if (stat(g_sock, &st) == 0)
			return;
		int status;
		ck_assert_msg(waitpid(g_pid, &status, WNOHANG) == 0, "memdecayd exited at start");
		usleep(25000);
	}
	ck_abort_msg("memdecayd did not create %s", g_sock);
}

static void stop_daemon(void)
{
	if (g_pid > 0) {
		kill(g_pid, SIGTERM);
		waitpid(g_pid, NULL, 0);
	}
	g_pid = -1;
	unlink(g_sock);
	rmdir(g_dir);
}

static md_client *attach(int64_t budget_pages)
{
	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = g_sock;
	cfg.engine_name = "gpu-publisher-test";
	cfg.page_tokens = 16;
	cfg.page_capacity = 64;
	cfg.max_seqs = 2;
	cfg.budget_engine_pages = budget_pages;
	md_client *c = NULL;
	int rc = -1;
	for (int i = 0; i < 100 && rc; i++) {
		rc = md_client_create_attached(&cfg, &c);
		if (rc)
			usleep(20000);
	}
	ck_assert_msg(rc == 0, "attach: %s", md_strerror(rc));
	return c;
}

/* What md_gpu_create must answer on this machine without a device. */
static int expected_no_device(const char **needle)
{
	if (!mdk_cuda_built()) {
		*needle = "built without CUDA";
		return -ENOTSUP;
	}
	*needle = "cudaGetDeviceCount";
	return -ENODEV;
}

static int have_device(void)
{
	return mdk_cuda_built() && mdk_cuda_probe(NULL) == 0;
}

/* The host ring end to end: 8 pages over a budget of 4 come back as
 * eviction commands, which the engine applies. */
static void host_ring_serves(md_client *c)
{
	uint64_t labels = 0;
	for (unsigned k = 0; k < 16; k++)
		labels = md_label_set(labels, k, MD_REGION_TOOL_OUT);
	for (uint32_t i = 0; i < 8; i++) {
		uint32_t slot, gen;
		ck_assert_int_eq(md_page_open(c, 0, (uint64_t)i * 16, 16, labels, &slot, &gen), 0);
		ck_assert_int_eq(md_seq_step(c, 0, 16), 0);
		ck_assert_int_eq(md_attn_page(c, slot, 0.01f * (float)(i + 1), 0), 0);
	}
	int got = 0;
	uint64_t t0 = md_now_ns();
	do {
		md_wait_commands(c, 100);
		struct md_evict ev[16];
		int n = md_poll_commands(c, ev, 16);
		ck_assert_int_ge(n, 0);
		for (int i = 0; i < n; i++)
			ck_assert_int_eq(md_page_free(c, ev[i].slot, MD_FREE_EVICTED), 0);
		got += n;
	} while (md_client_live_pages(c) > 4 && md_now_ns() - t0 < 10000000000ull);
	ck_assert_msg(md_client_live_pages(c) <= 4, "host ring: %d evictions, %u pages live", got,
		      md_client_live_pages(c));
	ck_assert_int_ge(got, 4);
}

START_TEST(test_bad_arguments)
{
	start_daemon();
	md_client *c = attach(-1);
	uint32_t id = md_client_engine_id(c);
	md_gpu *g = (md_gpu *)0x1;
	struct md_gpu_config cfg;
	md_gpu_config_init(&cfg);
	ck_assert_int_eq(md_gpu_create(NULL, &cfg, &g), -EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_int_eq(md_gpu_create(c, &cfg, NULL), -EINVAL);
	cfg.ring_capacity = 1000; /* not a power of two */
	ck_assert_int_eq(md_gpu_create(c, &cfg, &g), -EINVAL);
	cfg.ring_capacity = 1u << 25;
	ck_assert_int_eq(md_gpu_create(c, &cfg, &g), -EINVAL);
	md_gpu_config_init(&cfg);
	cfg.max_pages = 65; /* more than page_capacity */
	ck_assert_int_eq(md_gpu_create(c, &cfg, &g), -EINVAL);
	md_gpu_config_init(&cfg);
	cfg.device = -1;
	ck_assert_int_eq(md_gpu_create(c, &cfg, &g), -EINVAL);
	ck_assert_ptr_null(g);
	ck_assert_ptr_nonnull(strstr(md_client_last_error(c), "power of two"));

	/* Calls on no publisher refuse without touching anything. */
	struct md_gpu_probs pr;
	memset(&pr, 0, sizeof(pr));
	struct md_gpu_flash fl;
	memset(&fl, 0, sizeof(fl));
	ck_assert_int_eq(md_gpu_publish_probs(NULL, &pr, NULL), -EINVAL);
	ck_assert_int_eq(md_gpu_publish_flash(NULL, &fl, NULL), -EINVAL);
	ck_assert_int_eq(md_gpu_flush(NULL, NULL), -EINVAL);
	ck_assert_int_eq(md_gpu_pending(NULL, NULL), -EINVAL);
	struct md_gpu_counters ctr;
	memset(&ctr, 0xff, sizeof(ctr));
	md_gpu_counters(NULL, &ctr);
	ck_assert_uint_eq(ctr.attn_records | ctr.lifecycle_records | ctr.device_tail, 0);
	md_gpu_destroy(NULL);

	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.reattaches, 0);
	ck_assert_int_eq(md_client_attached(c), 1);
	ck_assert_uint_eq(md_client_engine_id(c), id);
	md_client_destroy(c);
	stop_daemon();
}
END_TEST

/* No CUDA build or no device: a clear error, nothing published, the client
 * and its host ring exactly as before. */
START_TEST(test_no_device_keeps_host_ring)
{
	if (have_device()) {
		fprintf(stderr, "gpu_publisher: a device is present; its path is gpu_ipc_e2e's\n");
		return;
	}
	start_daemon();
	md_client *c = attach(4);
	uint32_t id = md_client_engine_id(c);
	uint64_t inst = md_client_instance_id(c);
	const char *needle;
	int want = expected_no_device(&needle);
	md_gpu *g = (md_gpu *)0x1;
	int rc = md_gpu_create(c, NULL, &g);
	ck_assert_msg(rc == want, "md_gpu_create: %d (%s), want %d", rc, md_client_last_error(c),
		      want);
	ck_assert_ptr_null(g);
	ck_assert_msg(strstr(md_client_last_error(c), needle), "message: %s",
		      md_client_last_error(c));
	ck_assert_ptr_nonnull(strstr(md_client_last_error(c), "host ring"));
	/* Nothing changed on the daemon's side: same attachment, no reattach. */
	ck_assert_int_eq(md_client_attached(c), 1);
	ck_assert_uint_eq(md_client_engine_id(c), id);
	ck_assert_uint_eq(md_client_instance_id(c), inst);
	struct md_client_counters cc;
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.reattaches, 0);
	/* A second try answers the same (nothing cached half-way). */
	ck_assert_int_eq(md_gpu_create(c, NULL, &g), want);
	host_ring_serves(c);
	md_client_counters(c, &cc);
	ck_assert_uint_eq(cc.reattaches, 0);
	ck_assert_uint_eq(cc.lifecycle_dropped, 0);
	md_client_destroy(c);
	stop_daemon();
}
END_TEST

/* A detached client (no daemon) gets the same answer and stays usable. */
START_TEST(test_no_device_detached)
{
	if (have_device())
		return;
	struct md_client_config cfg;
	md_client_config_init(&cfg);
	cfg.socket_path = "/nonexistent/memdecayd.sock";
	cfg.page_capacity = 8;
	cfg.max_seqs = 1;
	md_client *c = NULL;
	ck_assert_int_eq(md_client_create(&cfg, &c), 0);
	ck_assert_int_eq(md_client_attached(c), 0);
	const char *needle;
	int want = expected_no_device(&needle);
	md_gpu *g = NULL;
	ck_assert_int_eq(md_gpu_create(c, NULL, &g), want);
	ck_assert_ptr_null(g);
	ck_assert_ptr_nonnull(strstr(md_client_last_error(c), needle));
	uint32_t slot, gen;
	ck_assert_int_eq(md_page_open(c, 0, 0, 16, 0, &slot, &gen), MD_EDETACHED);
	ck_assert_uint_eq(md_client_live_pages(c), 1);
	md_client_destroy(c);
}
END_TEST

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: check_gpu_publisher PATH_TO_MEMDECAYD\n");
		return 2;
	}
	g_daemon = argv[1];
	signal(SIGPIPE, SIG_IGN);
	Suite *s = suite_create("gpu_publisher");
	TCase *tc = tcase_create("no_device");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_no_device_keeps_host_ring);
	tcase_add_test(tc, test_no_device_detached);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
