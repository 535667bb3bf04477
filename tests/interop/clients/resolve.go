// Go's pure resolver (net.Resolver{PreferGo: true}) against whatever /etc/resolv.conf
// names: one JSON object per argument on stdout. Standard library only, so the test
// builds it offline with Debian's golang-go.
//
// Arguments: host:NAME (LookupHost: A and AAAA), ip4:NAME / ip6:NAME (LookupIP),
// srv:SERVICE:PROTO:NAME (LookupSRV, "_SERVICE._PROTO.NAME"; empty SERVICE and PROTO
// look NAME up as it is), dial:NAME:PORT (a TCP connection as net.Dial makes it, through
// the same resolver: the address it reached).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"
)

type srvRecord struct {
	Target   string `json:"target"`
	Port     uint16 `json:"port"`
	Priority uint16 `json:"priority"`
	Weight   uint16 `json:"weight"`
}

type result struct {
	Query     string      `json:"query"`
	Addresses []string    `json:"addresses,omitempty"`
	SRV       []srvRecord `json:"srv,omitempty"`
	CNAME     string      `json:"cname,omitempty"`
	Error     string      `json:"error,omitempty"`
	NotFound  bool        `json:"not_found,omitempty"`
}

func main() {
	resolver := &net.Resolver{PreferGo: true}
	out := json.NewEncoder(os.Stdout)
	for _, arg := range os.Args[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := result{Query: arg}
		var err error
		kind, rest, _ := strings.Cut(arg, ":")
		switch kind {
		case "host":
			r.Addresses, err = resolver.LookupHost(ctx, rest)
		case "ip4", "ip6":
			var ips []net.IP
			ips, err = resolver.LookupIP(ctx, kind, rest)
			for _, ip := range ips {
				r.Addresses = append(r.Addresses, ip.String())
			}
		case "dial":
			var conn net.Conn
			dialer := net.Dialer{Resolver: resolver}
			conn, err = dialer.DialContext(ctx, "tcp", rest)
			if err == nil {
				host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
				r.Addresses = []string{host}
				conn.Close()
			}
		case "srv":
			parts := strings.SplitN(rest, ":", 3)
			var srvs []*net.SRV
			r.CNAME, srvs, err = resolver.LookupSRV(ctx, parts[0], parts[1], parts[2])
			for _, s := range srvs {
				r.SRV = append(r.SRV, srvRecord{s.Target, s.Port, s.Priority, s.Weight})
			}
		default:
			err = fmt.Errorf("unknown query kind %q", kind)
		}
		cancel()
		sort.Strings(r.Addresses)
		if err != nil {
			r.Error = err.Error()
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) {
				r.NotFound = dnsErr.IsNotFound
			}
		}
		if encErr := out.Encode(r); encErr != nil {
			os.Exit(1)
		}
	}
}
