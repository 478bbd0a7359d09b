/*
 * journal.c — the stats journal's writer and reader (journal.h).
 *
 * Ingest only copies 40 bytes into a 1 MiB buffer; the main loop calls
 * md__journal_flush after each service pass and on every tick with a byte
 * budget, so a slow disk costs at most one bounded write per iteration and
 * never back-pressures an engine: when the buffer is full, entries are
 * dropped and counted (`stats` / the log at close).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"

struct md__journal {
	int fd;
	char path[4096];
	uint64_t max_bytes;
	char *buf;
	size_t len;
	struct md__journal_stats st;
};

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int md__journal_open(struct md__journal **out, const char *path, uint64_t max_bytes,
		     const struct md__journal_header *hdr, char *err, size_t errlen)
{
	struct md__journal *j = calloc(1, sizeof(*j));
	if (!j || !(j->buf = malloc(MD__JOURNAL_BUF_BYTES))) {
		free(j);
		snprintf(err, errlen, "journal %s: out of memory", path);
		return -ENOMEM;
	}
	snprintf(j->path, sizeof(j->path), "%s", path);
	j->max_bytes = max_bytes;
	/* O_NONBLOCK matters for a FIFO reader; regular files go to the page cache */
	j->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0600);
	int rc = j->fd < 0 ? -errno : 0;
	if (!rc)
		rc = write_all(j->fd, hdr, sizeof(*hdr));
	if (rc) {
		snprintf(err, errlen, "journal %s: %s", path, strerror(-rc));
		if (j->fd >= 0)
			close(j->fd);
		free(j->buf);
		free(j);
		return rc;
	}
	j->st.bytes_written = sizeof(*hdr);
	*out = j;
	return 0;
}

void md__journal_put(struct md__journal *j, const struct md__jrec *r)
{
	if (j->st.stopped) {
		j->st.dropped_max++;
		return;
	}
	if (j->st.bytes_written + j->len + sizeof(*r) > j->max_bytes) {
		j->st.stopped = 1;
		j->st.dropped_max++;
		return;
	}
	if (j->len + sizeof(*r) > MD__JOURNAL_BUF_BYTES) {
		j->st.dropped_full++;
		return;
	}
	memcpy(j->buf + j->len, r, sizeof(*r));
	j->len += sizeof(*r);
	j->st.records++;
}

long md__journal_flush(struct md__journal *j, size_t budget)
{
	if (!j->len)
		return 0;
	size_t n = budget && budget < j->len ? budget : j->len;
	ssize_t w = write(j->fd, j->buf, n);
	if (w < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		j->st.write_errors++;
		return -errno;
	}
	memmove(j->buf, j->buf + w, j->len - (size_t)w);
	j->len -= (size_t)w;
	j->st.bytes_written += (uint64_t)w;
	j->st.flushes++;
	return (long)w;
}

size_t md__journal_buffered(const struct md__journal *j)
{
	return j->len;
}

void md__journal_get_stats(const struct md__journal *j, struct md__journal_stats *st)
{
	*st = j->st;
}

const char *md__journal_path(const struct md__journal *j)
{
	return j->path;
}

void md__journal_close(struct md__journal *j)
{
	if (!j)
		return;
	for (int tries = 0; j->len && tries < 64; tries++)
		if (md__journal_flush(j, 0) < 0)
			break;
	close(j->fd);
	free(j->buf);
	free(j);
}

long md__journal_replay(const char *path, struct md__journal_header *hdr, md__journal_fn fn,
			void *ud, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	struct md__journal_header h;
	if (fread(&h, 1, sizeof(h), f) != sizeof(h) || h.magic != MD__JOURNAL_MAGIC ||
	    h.header_size != sizeof(h) || h.rec_size != sizeof(struct md__jrec)) {
		fclose(f);
		snprintf(err, errlen, "%s: not a memdecayd journal (version %u expected)", path,
			 MD__JOURNAL_VERSION);
		return -EPROTO;
	}
	if (h.version != MD__JOURNAL_VERSION) {
		fclose(f);
		snprintf(err, errlen, "%s: journal version %u, this tool reads %u", path, h.version,
			 MD__JOURNAL_VERSION);
		return -EPROTO;
	}
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
		h.region_name[r][MD__JOURNAL_NAME_LEN - 1] = 0;
	if (hdr)
		*hdr = h;
	long n = 0;
	struct md__jrec rec;
	while (fread(&rec, 1, sizeof(rec), f) == sizeof(rec)) {
		n++;
		if (fn && fn(&rec, ud))
			break;
	}
	fclose(f);
	return n;
}
