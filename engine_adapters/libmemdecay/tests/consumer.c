/* consumer.c — a program built against an installed libmemdecay (pkg-config). */
#include <memdecay.h>
#include <stdio.h>

int main(void)
{
	struct md_client_config cfg;
	md_client *c;
	md_client_config_init(&cfg);
	cfg.socket_path = "/nonexistent/memdecayd.sock";
	if (md_client_create(&cfg, &c))
		return 1;
	uint32_t slot, gen;
	int rc = md_page_open(c, 0, 0, 1, 0, &slot, &gen);
	printf("attached=%d open=%s abi=%u\n", md_client_attached(c), md_strerror(rc), MD_ABI_MAJOR);
	md_client_destroy(c);
	return rc == MD_EDETACHED ? 0 : 1;
}
