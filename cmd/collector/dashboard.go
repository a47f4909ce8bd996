package main

import (
	"flag"

	"github.com/gin-gonic/gin"

	"github.com/schedloop/schedloop/internal/api"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/web"
)

// registerAPIFlags adds the flags that guard the JSON API.
func registerAPIFlags(fs *flag.FlagSet, getenv func(string) string) *api.Options {
	o := &api.Options{}
	fs.StringVar(&o.Token, "api-token", getenv("SCHEDLOOP_API_TOKEN"),
		"when set, /api/v1 requires \"Authorization: Bearer <token>\" (env SCHEDLOOP_API_TOKEN); empty: open, read-only")
	fs.StringVar(&o.AuthHeader, "auth-header", "",
		"trust requests carrying this header, set by an authenticating reverse proxy (e.g. X-Forwarded-User)")
	fs.StringVar(&o.Cluster, "cluster-name", "cluster", "the cluster's name in the dashboard's per-cluster view")
	return o
}

// mountDashboard serves the read-only JSON API under /api/v1 and the
// embedded dashboard for every other path.
func mountDashboard(r *gin.Engine, s *store.Store, opts api.Options) {
	api.Register(r, s, opts)
	r.NoRoute(gin.WrapH(web.Handler()))
}
