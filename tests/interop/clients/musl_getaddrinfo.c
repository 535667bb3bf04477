/* musl's stub resolver as a C program sees it: getaddrinfo(3), IPv4, COUNT times in a
 * row, each lookup's addresses in the order getaddrinfo returns them (musl keeps the
 * DNS order for IPv4, and musl before 1.2.4 takes a truncated UDP answer as it is:
 * no EDNS, no retry over TCP). Built with musl-gcc -static; reads /etc/resolv.conf.
 *
 *   musl_getaddrinfo NAME COUNT   → COUNT lines, each a JSON array of addresses
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s NAME COUNT\n", argv[0]);
        return 2;
    }
    int count = atoi(argv[2]);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    for (int i = 0; i < count; i++) {
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(argv[1], NULL, &hints, &res);
        if (rc != 0) {
            printf("{\"error\": \"%s\"}\n", gai_strerror(rc));
            continue;
        }
        printf("[");
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            char text[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, text,
                      sizeof text);
            printf("%s\"%s\"", ai == res ? "" : ", ", text);
        }
        printf("]\n");
        freeaddrinfo(res);
    }
    return 0;
}
