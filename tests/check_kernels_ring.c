/*
 * check_kernels_ring.c — the CUDA IPC stats ring's contract where it cannot run:
 * built without CUDA every call says so (-ENOTSUP, "built without CUDA"); built
 * with CUDA on a machine without a device, creating or opening a ring fails with
 * -ENODEV and the driver's answer, and bad arguments are refused first
 * (-EINVAL); the same for device-completed attention records, the pending
 * count and device allocation.  With a device (MEMDECAY_EXPECT_GPU=1 makes one
 * mandatory) the engine side is exercised in-process, device-completed
 * attention's all-or-none limit included; the two-process round trip is
 * bench/gpu/ring_roundtrip.
 */
#include <check.h>
#include "test_util.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "md_cuda_attn_rec.h"
#include "md_cuda_ring.h"
#include "memdecay_abi.h"

_Static_assert(sizeof(struct mdk_cuda_ring_export) == 192, "export record is 192 bytes");
_Static_assert(sizeof(struct md_stats_rec) == MDK_CUDA_RING_REC_SIZE, "ring record size");

static int have_device(void)
{
	int n = 0;
	int rc = mdk_cuda_probe(&n);
	const char *want = getenv("MEMDECAY_EXPECT_GPU");
	if (want && *want == '1')
		ck_assert_msg(rc == 0 && n > 0, "MEMDECAY_EXPECT_GPU=1 but no device: %s",
			      mdk_cuda_last_error());
	return rc == 0;
}

static void valid_looking_export(struct mdk_cuda_ring_export *ex)
{
	memset(ex, 0, sizeof(*ex));
	ex->magic = MDK_CUDA_RING_EXPORT_MAGIC;
	ex->version = MDK_CUDA_RING_VERSION;
	ex->capacity = 1024;
	ex->rec_size = MDK_CUDA_RING_REC_SIZE;
	ex->bytes = MDK_CUDA_RING_DATA_OFFSET + 1024ull * MDK_CUDA_RING_REC_SIZE;
}

START_TEST(test_without_cuda)
{
	if (mdk_cuda_built())
		return;
	struct mdk_cuda_ring *r = (struct mdk_cuda_ring *)1;
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 1024, 0), -ENOTSUP);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "without CUDA"));
	struct mdk_cuda_ring_export ex;
	valid_looking_export(&ex);
	struct mdk_cuda_ring_reader *rd = (struct mdk_cuda_ring_reader *)1;
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, &ex, 0), -ENOTSUP);
	ck_assert_ptr_null(rd);
	ck_assert_int_eq(mdk_cuda_ring_drain(NULL, NULL, 0), -ENOTSUP);
	ck_assert_int_eq(mdk_cuda_ring_push(NULL, NULL, 0, NULL), -ENOTSUP);
	ck_assert_int_eq(mdk_cuda_ring_push_attn(NULL, NULL, 0, NULL, 0, 16, 0.0f, 0, NULL),
			 -ENOTSUP);
	ck_assert_int_eq(mdk_cuda_ring_pending(NULL, NULL), -ENOTSUP);
	ck_assert_uint_eq(mdk_cuda_ring_tail(NULL), 0);
	void *p = (void *)1;
	ck_assert_int_eq(mdk_cuda_alloc(&p, 64, 0), -ENOTSUP);
	ck_assert_ptr_null(p);
	mdk_cuda_free(NULL);
	ck_assert_int_eq(mdk_cuda_probe(NULL), -ENOTSUP);
	mdk_cuda_ring_destroy(NULL);
	mdk_cuda_ring_close(NULL);
}
END_TEST

START_TEST(test_bad_arguments)
{
	if (!mdk_cuda_built())
		return;
	struct mdk_cuda_ring *r = NULL;
	ck_assert_int_eq(mdk_cuda_ring_create(NULL, 1024, 0), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 1000, 0), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 0, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "power of two"));
	struct mdk_cuda_ring_reader *rd = NULL;
	struct mdk_cuda_ring_export ex;
	memset(&ex, 0, sizeof(ex));
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, &ex, 0), -EINVAL);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "export record invalid"));
	valid_looking_export(&ex);
	ex.capacity = 1000;
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, &ex, 0), -EINVAL);
	valid_looking_export(&ex);
	ex.bytes += 64;
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, &ex, 0), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, NULL, 0), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_get_export(NULL, &ex), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_push(NULL, NULL, 0, NULL), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_drain(NULL, NULL, 0), -EINVAL);
	ck_assert_ptr_null(rd);
	ck_assert_int_eq(mdk_cuda_ring_push_attn(NULL, NULL, 0, NULL, 0, 16, 0.0f, 0, NULL),
			 -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_pending(NULL, NULL), -EINVAL);
	ck_assert_int_eq(mdk_cuda_alloc(NULL, 64, 0), -EINVAL);
}
END_TEST

START_TEST(test_no_device)
{
	if (!mdk_cuda_built() || have_device())
		return;
	struct mdk_cuda_ring *r = (struct mdk_cuda_ring *)1;
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 1024, 0), -ENODEV);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "cudaGetDeviceCount"));
	struct mdk_cuda_ring_export ex;
	valid_looking_export(&ex);
	struct mdk_cuda_ring_reader *rd = (struct mdk_cuda_ring_reader *)1;
	ck_assert_int_eq(mdk_cuda_ring_open(&rd, &ex, 0), -ENODEV);
	ck_assert_ptr_null(rd);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "no usable CUDA device"));
	void *p = (void *)1;
	ck_assert_int_eq(mdk_cuda_alloc(&p, 64, 0), -ENODEV);
	ck_assert_ptr_null(p);
	ck_assert_ptr_nonnull(strstr(mdk_cuda_last_error(), "cudaGetDeviceCount"));
}
END_TEST

START_TEST(test_device_engine_side)
{
	if (!mdk_cuda_built() || !have_device())
		return;
	struct mdk_cuda_ring *r = NULL;
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 64, 0), 0);
	struct mdk_cuda_ring_export ex;
	ck_assert_int_eq(mdk_cuda_ring_get_export(r, &ex), 0);
	ck_assert_uint_eq(ex.magic, MDK_CUDA_RING_EXPORT_MAGIC);
	ck_assert_uint_eq(ex.capacity, 64);
	struct md_stats_rec recs[70];
	memset(recs, 0, sizeof(recs));
	for (int i = 0; i < 70; i++)
		recs[i].seq = (uint32_t)i;
	/* Nobody drains: 64 fit, 6 are dropped and counted, never blocked on. */
	ck_assert_int_eq(mdk_cuda_ring_push(r, recs, 70, NULL), 64);
	ck_assert_uint_eq(mdk_cuda_ring_dropped(r), 6);
	ck_assert_int_eq(mdk_cuda_ring_push(r, recs, 1, NULL), 0);
	ck_assert_uint_eq(mdk_cuda_ring_dropped(r), 7);
	mdk_cuda_ring_destroy(r);

	/* Device-completed attention: all or none under the limit. */
	ck_assert_int_eq(mdk_cuda_ring_create(&r, 64, 0), 0);
	float *tm = NULL;
	ck_assert_int_eq(mdk_cuda_alloc((void **)&tm, 16 * sizeof(float), 0), 0);
	memset(recs, 0, sizeof(recs));
	for (int i = 0; i < 70; i++) {
		recs[i].type = MD_REC_ATTN_PAGE;
		mdk_attn_rec_stage((uint8_t *)&recs[i], 0, 1.0f, 0xffff);
	}
	ck_assert_int_eq(mdk_cuda_ring_push_attn(r, recs, 40, tm, 1, 16, 0.01f, 48, NULL), 40);
	ck_assert_int_eq(mdk_cuda_ring_push_attn(r, recs, 10, tm, 1, 16, 0.01f, 48, NULL), 0);
	ck_assert_uint_eq(mdk_cuda_ring_dropped(r), 10);
	ck_assert_uint_eq(mdk_cuda_ring_tail(r), 40);
	ck_assert_int_eq(mdk_cuda_ring_pending(r, NULL), 40);
	mdk_attn_rec_stage((uint8_t *)&recs[3], 1, 1.0f, 0xffff); /* past n_pages */
	ck_assert_int_eq(mdk_cuda_ring_push_attn(r, recs, 4, tm, 1, 16, 0.01f, 0, NULL), -EINVAL);
	ck_assert_int_eq(mdk_cuda_ring_push_attn(r, recs, 1, tm, 1, 17, 0.01f, 0, NULL), -EINVAL);
	mdk_cuda_free(tm);
	mdk_cuda_ring_destroy(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kernels_ring");
	TCase *tc = tcase_create("ring");
	tcase_add_test(tc, test_without_cuda);
	tcase_add_test(tc, test_bad_arguments);
	tcase_add_test(tc, test_no_device);
	tcase_add_test(tc, test_device_engine_side);
	suite_add_tcase(s, tc);
	return md_test_main(s);
}
