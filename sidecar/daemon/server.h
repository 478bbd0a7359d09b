/* server.h — memdecayd's socket, signals and main loop (server.c). */
#ifndef MD_SERVER_H
#define MD_SERVER_H

#include <stddef.h>

struct md__daemon;
int md__server_listen(struct md__daemon *d, char *err, size_t errlen);
int md__server_start(struct md__daemon *d, char *err, size_t errlen);
void md__server_run(struct md__daemon *d);
void md__server_shutdown(struct md__daemon *d);

#endif
