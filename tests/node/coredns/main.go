// Command coredns is CoreDNS with only the plugins the real-node tier's Corefile names: the cluster.local
// zone from the API server (kubernetes), other names forwarded to the host's resolver (forward), the
// listening address (bind), readiness, health, caching and error logging. dnsserver.Directives keeps
// them in the order CoreDNS's own plugin.cfg gives them, which is the order they see a query.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes", "forward"}
}

func main() { coremain.Run() }
