// CoreDNS with only the plugins kubeadm's Corefile names, for the kind node image's CoreDNS image.
// Built here (offline/deploy_suite_offline/kind/tools.py) because no registry serves the usual image;
// compiling CoreDNS as a library with a chosen plugin set keeps the cloud SDKs of its default
// build out (docs/offline-cluster.md, "The kind provider").
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins of kubeadm v1.36's Corefile, each registering itself.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives: the same plugins in CoreDNS's own execution order (its dnsserver.Directives, which
// lists every plugin); a Corefile naming any other directive is refused.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
