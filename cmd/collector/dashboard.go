package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/web"
)

// prefixList is a repeatable, comma-separated CIDR flag.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	var s []string
	for _, x := range *p {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

func (p *prefixList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		pre, err := netip.ParsePrefix(f)
		if err != nil {
			addr, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return fmt.Errorf("%q is not a CIDR prefix (10.0.0.0/8) or an address", f)
			}
			pre = netip.PrefixFrom(addr, addr.BitLen())
		}
		*p = append(*p, pre.Masked())
	}
	return nil
}

// apiConfig is what the API flags gather.
type apiConfig struct {
	api.Options
	trusted prefixList
}

// registerAPIFlags adds the flags that guard the JSON API.
func registerAPIFlags(fs *flag.FlagSet, getenv func(string) string) *apiConfig {
	o := &apiConfig{}
	fs.StringVar(&o.Token, "api-token", getenv("SCHEDLOOP_API_TOKEN"),
		"when set, /api/v1 requires \"Authorization: Bearer <token>\" (env SCHEDLOOP_API_TOKEN; 16 characters or more); empty: open, read-only")
	fs.StringVar(&o.AuthHeader, "auth-header", "",
		"trust requests carrying this header, set by an authenticating reverse proxy (e.g. X-Forwarded-User); needs -auth-trusted-proxies")
	fs.Var(&o.trusted, "auth-trusted-proxies",
		"addresses (CIDR, comma-separated or repeated) of the proxy that sets -auth-header; the header is ignored from anywhere else")
	fs.StringVar(&o.Cluster, "cluster-name", "cluster", "the cluster's name in the dashboard's per-cluster view")
	fs.IntVar(&o.MaxConcurrent, "api-max-concurrent", api.DefaultMaxConcurrent,
		"API requests answered at once, each with its own Postgres connection apart from ingest's; more wait -api-queue-wait, then get 429")
	fs.DurationVar(&o.QueueWait, "api-queue-wait", api.DefaultQueueWait,
		"how long an API request waits for one of -api-max-concurrent places before it is answered 429 with Retry-After")
	fs.DurationVar(&o.Timeout, "api-timeout", 15*time.Second, "how long an API request's database reads may take before it is answered 503")
	return o
}

// minTokenLen is the shortest API token accepted: the shipped Secret's
// placeholder, or any word a person types, is refused.
const minTokenLen = 16

func (o *apiConfig) validate() error {
	switch {
	case o.Token != "" && len(o.Token) < minTokenLen:
		return fmt.Errorf("flag -api-token (env SCHEDLOOP_API_TOKEN): a %d-character token is guessable: use %d or more random characters (openssl rand -hex 32)",
			len(o.Token), minTokenLen)
	case o.AuthHeader != "" && len(o.trusted) == 0:
		return fmt.Errorf("flag -auth-header %q: needs -auth-trusted-proxies, the addresses of the proxy that sets it (any client could send the header itself)", o.AuthHeader)
	case o.MaxConcurrent <= 0:
		return fmt.Errorf("flag -api-max-concurrent %d: want a positive number", o.MaxConcurrent)
	case o.QueueWait <= 0:
		return fmt.Errorf("flag -api-queue-wait %v: want a positive duration", o.QueueWait)
	case o.Timeout <= 0:
		return fmt.Errorf("flag -api-timeout %v: want a positive duration", o.Timeout)
	}
	return nil
}

// options are the API's options with the trusted proxies parsed.
func (o *apiConfig) options() api.Options {
	opts := o.Options
	opts.TrustedProxies = o.trusted
	return opts
}

// mountDashboard serves the read-only JSON API under /api/v1 and the
// embedded dashboard for every other path but other /api/ ones, which get
// a JSON 404 rather than the dashboard's page.
func mountDashboard(r *gin.Engine, s *store.Store, opts api.Options) {
	api.Register(r, s, opts)
	dash := gin.WrapH(web.Handler())
	r.NoRoute(func(c *gin.Context) {
		if strings.HasPrefix(c.Request.URL.Path, "/api/") {
			api.NotFound(c)
			return
		}
		dash(c)
	})
}
